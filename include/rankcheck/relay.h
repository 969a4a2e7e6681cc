#pragma once
// Host relays: past one master's connections, the members of a host meet it over
// one connection. The first member of a host to bind the host-local endpoint (an
// abstract unix socket named from the master's endpoint and the user: per network
// namespace, so pods in namespaces of their own relay for themselves) relays for
// the others, itself included.
//
//   member              relay                          master
//     |  -- connect -->   |  -- relay hello (once) -->    |  admit / reject
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

#include <rankcheck/auth.h>
#include <rankcheck/deadline.h>
#include <rankcheck/protocol.h>

namespace rankcheck {

/// What a relay says of itself to the master, in place of a hello. With a job
/// token, a MAC over the challenge's nonce proves it holds the token.
struct RelayHello {
  std::string host;
  uint32_t pid = 0;
  std::string job_id;
  Nonce client_nonce{};
  Mac mac{};
};

enum class ChannelOp : uint8_t {
  kOpen = 1,     ///< relay -> master: a member connected; the master answers with a challenge
  kData = 2,     ///< either way: one whole frame of the member's (header and payload)
  kClose = 3,    ///< either way: the member's connection ended, or is to be ended
  kRefused = 4,  ///< relay -> master: refused by the relay (the reject sent, the hello)
  kAll = 5,      ///< master -> relay (channel 0): a frame for every member it carries
};

/// One member's frame on a relay's connection.
struct ChannelFrame {
  uint32_t channel = 0;
  ChannelOp op = ChannelOp::kData;
  std::vector<uint8_t> frame;  ///< kData: the member's frame; kRefused: the reject it was sent
  std::vector<uint8_t> hello;  ///< kRefused: the hello's payload, as the member sent it
};

/// From a relay to a member that waits for its challenge: the relay is alive and
/// has not reached the master yet, and why (in the words a member's own attempt
/// would use). Or, `master_closed`: the master closed the relay's connection (it
/// exited, or died): the member's own connection to it would have closed too.
struct RelayWait {
  std::string status;
  uint32_t attempts = 0;
  bool master_closed = false;
};

std::vector<uint8_t> encode(const RelayHello& m);
std::vector<uint8_t> encode_signed(const RelayHello& m, const JobToken& token, const Nonce& server);
bool verify_relay_hello(std::span<const uint8_t> payload, const JobToken& token,
                        const Nonce& server);
std::vector<uint8_t> encode_channel(uint32_t channel, ChannelOp op,
                                    std::span<const uint8_t> frame = {},
                                    std::span<const uint8_t> hello = {});
std::vector<uint8_t> encode(const RelayWait& m);
Result<RelayHello> decode_relay_hello(std::span<const uint8_t> payload);
Result<ChannelFrame> decode_channel(std::span<const uint8_t> payload);
Result<RelayWait> decode_relay_wait(std::span<const uint8_t> payload);

/// The host-local endpoint of the relays of the job whose master is addr:port,
/// for this user: an abstract unix socket's name (without its leading NUL).
std::string relay_endpoint(const std::string& master_addr, uint16_t master_port);

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
