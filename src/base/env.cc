#include "base/env.h"

#include <fmt/format.h>

extern char** environ;

namespace rankcheck {

EnvMap process_env() {
  EnvMap env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry(*p);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Result<EnvMap> parse_env_text(std::string_view text) {
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

const std::string* env_get(const EnvMap& env, std::string_view key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

}  // namespace rankcheck
