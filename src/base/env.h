#pragma once
// The process environment enters here, and only here, as a plain map.

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace rankcheck {

using EnvMap = std::map<std::string, std::string, std::less<>>;

/// This process's environment. The one place that reads `environ`.
EnvMap process_env();

/// The value of `key`, or nullptr when unset.
const std::string* env_get(const EnvMap& env, std::string_view key);

}  // namespace rankcheck
