// Fuzzes the environment parser and identity detection: any KEY=VALUE text, as a
// launcher (or a user) could leave it. Whatever the identity, a record made of
// it must round-trip through the wire format.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "../env_text.h"
#include "identity/identity.h"
#include "protocol/messages.h"

using namespace rankcheck;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto env = test::parse_env_text(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!env) return 0;
  Identity id = detect_identity(*env, {});
  if (!id.usable()) return 0;
  HostFacts host;
  host.host = "fuzz";
  Record r = make_record(id, host, *env);
  auto frame = encode(Hello{r, {}, {}, {}});
  auto back = decode_hello(std::span(frame).subspan(kHeaderSize));
  if (!back) std::abort();  // what we send, we must accept
  return 0;
}
