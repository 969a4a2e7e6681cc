#pragma once
// The network side of the rehearsal of NCCL's connections: a listener on an
// ephemeral port of the address NCCL would use, which proves which host it is,
// and a prober that connects to other hosts' listeners and checks the proof.
//
//   prober                                  listener
//     | -- "RKNP" nonce(16) ticket(32) ---->  |   both from the master's plan: with a
//     |                                        |   job token, the ticket is a MAC over
//     |                                        |   the nonce and the listener's identity
//     | <- "RKNP" u8 n, id(n), mac(32) -----   |   id: the answering host (its name and
//                                                  network stack); mac: HMAC with the job
//                                                  token over the nonce, the ticket and
//                                                  the id (zeros without a token)
//     | <- "RKNB" ---------------------------  |   or: too busy (a flood), then closed
//
// With a token, a listener answers only a ticket made for it, each once: to
// anyone else it says nothing, not even which host it is.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/deadline.h"
#include "base/result.h"
#include "model/path.h"
#include "protocol/auth.h"

namespace rankcheck {

inline constexpr std::string_view kPathLabel = "rankcheck path 2";

/// What a host answers a probe with: its name and its network stack.
std::string path_identity(std::string_view host, std::string_view netns);

/// Listens on `address` (numeric; an IPv6 link-local one on interface `ifname`)
/// at port 0 and answers probes on a thread of its own until destroyed.
class PathListener {
 public:
  static Result<std::unique_ptr<PathListener>> open(const std::string& address,
                                                    const std::string& ifname, std::string identity,
                                                    const JobToken* token);
  ~PathListener();
  PathListener(const PathListener&) = delete;
  PathListener& operator=(const PathListener&) = delete;
  uint16_t port() const { return port_; }
  /// Connections told "busy" and closed so far: past the bounds on unproven ones.
  size_t flooded() const { return flooded_.load(); }

 private:
  struct Pending {
    int fd;
    Clock::time_point until;
    std::vector<uint8_t> rx;
    std::string source;  // the peer's address
  };
  PathListener() = default;
  void serve();
  void accept_some(std::vector<Pending>& pending);
  bool read_question(Pending& p, Clock::time_point now);
  void answer(int fd, std::span<const uint8_t> rx);
  std::atomic<size_t> flooded_{0};
  std::unordered_set<std::string> answered_;  // tickets' nonces, on the listener's thread
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::string identity_;
  std::optional<JobToken> token_;
  std::thread thread_;
};

/// Connects to every target, at most `in_flight` at a time, each within `per_conn`
/// (and all by `by`), and says what each found. The source address is the
/// kernel's choice, as for NCCL.
std::vector<PathResult> probe_paths(uint32_t self_host, const std::string& self_identity,
                                    const std::vector<PathTarget>& targets, Millis per_conn,
                                    size_t in_flight, Deadline by, const JobToken* token);

/// This host's net.ipv4.ip_local_port_range, {0, 0} when /proc does not say.
std::pair<uint16_t, uint16_t> local_port_range();

}  // namespace rankcheck
