#pragma once
// NCCL's parameters: how it reads an integer NCCL_* variable (src/misc/param.cc
// ncclLoadParam) and the configuration files it reads under the environment
// (initEnv, setEnvFile).

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/env.h"

namespace rankcheck::nccl {

/// ncclLoadParam: unset or empty, the default; else strtoll(value, nullptr, 0), which
/// reads the leading number and ignores the rest ("1 ", "3\r" and "1abc" are numbers,
/// "abc" is 0, "0x10" 16); out of range (ERANGE), the default.
int64_t param(const EnvMap& env, std::string_view name, int64_t dflt);
/// The same reading of one value: nullopt where ncclLoadParam would keep the default.
std::optional<int64_t> param_value(const std::string& value);

/// Reads a file whole; nullopt when it cannot be opened.
using ReadFileFn = std::function<std::optional<std::string>(const std::string& path)>;

/// The environment NCCL sees once it has read its configuration files (initEnv):
/// NCCL_CONF_FILE when set and non-empty, else $HOME/.nccl.conf; then
/// /etc/nccl.conf. setEnvFile: a line starting with '#' is a comment; a line's final
/// '\n' goes, and nothing else (the '\r' of a CRLF file stays in the value); the name
/// runs to the first '='; names and values are cut at 1,023 characters; a variable
/// already set (in the environment or an earlier file) is never replaced.
/// (NCCL finds the home folder with getpwuid, which is $HOME for a process that did
/// not change it.)
struct Conf {
  EnvMap env;                                            ///< effective: environment + files
  std::map<std::string, std::string, std::less<>> from;  ///< name -> file, for values from a file
  std::vector<std::string> files_read;                   ///< the files that exist, in order
};
Conf apply_conf(const EnvMap& env, const ReadFileFn& read);

}  // namespace rankcheck::nccl
