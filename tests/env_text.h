#pragma once
// The tests' environment files (tests/fixtures/env/*): `KEY=VALUE` lines; blank lines
// and `#` comments are skipped, an optional `export ` prefix is accepted. The unit
// tests read the fixtures with it, and the identity fuzzer its inputs.

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "base/env.h"
#include "base/result.h"

namespace rankcheck::test {

inline Result<EnvMap> parse_env_text(std::string_view text) {
  EnvMap env;
  int line_no = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ')
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.substr(0, 7) == "export ") line.remove_prefix(7);
    auto eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Error{fmt::format("line {}: expected KEY=VALUE, got '{}'", line_no, line)};
    }
    env.insert_or_assign(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return env;
}

}  // namespace rankcheck::test
