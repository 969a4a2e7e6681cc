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

const std::string* env_get(const EnvMap& env, std::string_view key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

}  // namespace rankcheck
