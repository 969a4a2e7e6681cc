#pragma once
// What a host's relay and the master say to each other (rendezvous/relay.h has the
// relay itself): the relay's hello, one member's frame on the relay's connection,
// and the relay's word to a member that waits for the master.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "protocol/auth.h"
#include "protocol/messages.h"

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

}  // namespace rankcheck
