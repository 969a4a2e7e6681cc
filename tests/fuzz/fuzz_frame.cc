// Fuzzes the stream decoder: arbitrary bytes arrive in arbitrary pieces; every
// whole frame is handed to the decoder of its type. Nothing may crash, hang or
// allocate more than a type's cap.

#include <cstddef>
#include <cstdint>

#include "protocol/messages.h"

using namespace rankcheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t piece = 1 + data[0] % 64;  // how the bytes trickle in
  FrameBuffer buf;
  for (size_t at = 1; at < size; at += piece) {
    buf.feed(std::span(data + at, std::min(piece, size - at)));
    while (true) {
      auto frame = buf.next();
      if (!frame || !frame->has_value()) break;
      const auto& p = (*frame)->payload;
      switch (static_cast<MsgType>((*frame)->header.type)) {
        case MsgType::kChallenge:
          (void)decode_challenge(p);
          break;
        case MsgType::kHello:
          (void)decode_hello(p);
          break;
        case MsgType::kAdmit:
          (void)decode_admit(p);
          break;
        case MsgType::kReject:
          (void)decode_reject(p);
          break;
        case MsgType::kVerdict:
          (void)decode_verdict(p);
          break;
        case MsgType::kStageResult:
          (void)decode_stage_report(p);
          break;
        case MsgType::kWatchHello:
          (void)decode_watch_hello(p);
          break;
        case MsgType::kWatchEvent:
          (void)decode_watch_event(p);
          break;
        case MsgType::kWatchOrder:
          (void)decode_watch_order(p);
          break;
      }
    }
    if (!buf.next()) break;  // the stream is broken: a real reader closes it here
  }
  return 0;
}
