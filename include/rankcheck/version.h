#pragma once

#include <string_view>

namespace rankcheck {

inline constexpr std::string_view kVersion = "0.1.0";

}  // namespace rankcheck
