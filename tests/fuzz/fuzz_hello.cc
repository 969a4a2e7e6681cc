// Fuzzes the hello (record) parser with what a hostile peer could send, then
// drives what the master does with an admitted record: the rules over it (twice,
// as a duplicate) and both renderers. A record that decodes must re-encode to
// the same bytes.

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "protocol/messages.h"
#include "protocol/wire.h"
#include "report/report.h"
#include "rules/rules.h"

using namespace rankcheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A peer cannot send more than the hello's cap: the frame reader refuses the
  // header first. Beyond it, encode() trims and the round trip below would differ.
  if (size > payload_cap(uint16_t(MsgType::kHello))) return 0;
  auto hello = decode_hello(std::span(data, size));
  if (!hello) return 0;
  auto frame = encode(*hello);
  if (!std::equal(frame.begin() + kHeaderSize, frame.end(), data, data + size)) std::abort();

  // Huge claimed worlds only make the rules' per-rank loops long (up to 1M ranks,
  // bounded, tested elsewhere): the fuzzer's time is better spent on shapes.
  if (hello->record.world_size > 4096) return 0;
  JobView v;
  v.world_size = std::max(1, std::min(hello->record.world_size, 64));
  v.master_resolved = {"127.0.1.1"};
  v.gpu_stage = true;
  v.members.push_back(Member{hello->record, 1.5, "198.18.0.2:40000"});
  v.members.push_back(Member{hello->record, 2.5, "in-process"});
  Report report;
  report.world_size = v.world_size;
  report.findings = run_checks(v);
  report.members = v.members;
  (void)render_text(report, {true});
  (void)render_json(report);
  (void)local_checks(hello->record);
  return 0;
}
