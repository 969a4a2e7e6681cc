#pragma once
// Host relays: past one master's connections, the members of a host meet it over
// one connection. The first member of a host to bind the host-local endpoint (an
// abstract unix socket named from the master's endpoint and the user: per network
// namespace, so pods in namespaces of their own relay for themselves) relays for
// the others, itself included.
//
//   member              relay                          master
//     |  -- connect -->   |  -- relay hello (once) -->    |  admit / reject
//     |  -- ask -------> |                                |  with a job token: the relay
//     |  <-- proof ----- |                                |  proves it to the member first
//     |                   |  -- channel k: open ------>   |
//     |  <-- challenge -- |  <-- channel k: challenge --  |  a nonce per member
//     |  -- hello ------> |  -- channel k: hello ----->   |  checked by the relay too
//     |  <-- admit, verdict, plan ... ------------------- |
//     |  -- stage result, path report --> ... ----------> |
//     |  -- close ------> |  -- channel k: close ----->   |
//
// Every frame of a member is its own, end to end: its record, its hello's MAC over
// its channel's nonce, its verdict's MAC, so that the master's rules and report
// are the same as for members that connect directly, and a relay cannot forge a
// verdict. A relay refuses a member of another job, or without the job token, as
// the master would, and tells the master. A member whose relay dies (or stands
// down: the master refused it) joins the master directly within its deadline;
// the master takes the same rank and pid back in place of its relayed one.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "protocol/auth.h"
#include "protocol/messages.h"
#include "protocol/relay_messages.h"

namespace rankcheck {

/// The host-local endpoint of the relays of the job whose master is addr:port,
/// for this user: an abstract unix socket's name (without its leading NUL). With
/// a job token, the name is a MAC over the job id, the port and the address: a
/// process without the token cannot know it, so it cannot take it first.
std::string relay_endpoint(const std::string& master_addr, uint16_t master_port,
                           std::string_view job_id = {}, const JobToken* token = nullptr);

/// With a job token, a member's first frame to a relay is a kRelayAsk with a fresh
/// nonce, and the relay's first answer a kRelayProof: this MAC over the nonce and
/// the job id. A member takes no challenge through a relay that has not proved it.
Mac relay_proof(const JobToken& token, const Nonce& member_nonce, std::string_view job_id);
/// Whether `payload` (a kRelayProof's) is that MAC, compared in constant time.
bool verify_relay_proof(const JobToken& token, std::span<const uint8_t> payload,
                        const Nonce& member_nonce, std::string_view job_id);

struct RelayOptions {
  std::string endpoint;  ///< relay_endpoint()
  std::string master_addr;
  uint16_t master_port = 0;
  std::string host;  ///< this host's name, as the members' records carry it
  uint32_t pid = 0;
  std::string job_id;
  const JobToken* token = nullptr;
  Deadline give_up = Deadline::never();  ///< stop trying to reach the master
  Deadline stop_by = Deadline::never();  ///< the relay is gone by then, whatever happens
  Millis handshake{5000};
  Millis first_delay{0};      ///< before its first attempt (first_connect_delay in member.h)
  size_t max_members = 4096;  ///< members it carries at once (more wait in its backlog)
  std::function<void(const std::string&)> log = [](const std::string&) {};
};

/// A running relay: a thread of its own, serving the host's members.
class Relay {
 public:
  /// Becomes this host's relay: nullptr when another process already is (the
  /// endpoint is taken), or the endpoint cannot be bound (`why` says so).
  static std::unique_ptr<Relay> start(RelayOptions options, std::string* why = nullptr);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  /// Waits until every member it carried has closed its connection or the master
  /// closed its own, `deadline` at most (and stop_by), then stops.
  void finish(Deadline deadline);

 private:
  struct Impl;
  explicit Relay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rankcheck
