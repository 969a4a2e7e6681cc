// NCCL's parameters, read in NVIDIA/nccl src/misc/param.cc at v2.18.6-1 and v2.28.9-1.

#include "nccl/param.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace rankcheck::nccl {

int64_t param(const EnvMap& env, std::string_view name, int64_t dflt) {
  const std::string* v = env_get(env, name);
  return v == nullptr ? dflt : param_value(*v).value_or(dflt);
}

std::optional<int64_t> param_value(const std::string& value) {
  if (value.empty()) return std::nullopt;
  errno = 0;
  long long n = std::strtoll(value.c_str(), nullptr, 0);
  return errno != 0 ? std::nullopt : std::optional<int64_t>(n);
}

Conf apply_conf(const EnvMap& env, const ReadFileFn& read) {
  Conf conf;
  conf.env = env;
  auto apply = [&conf, &read](const std::string& path) {
    std::optional<std::string> text = read(path);
    if (!text) return;
    conf.files_read.push_back(path);
    std::string_view rest = *text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      if (line.empty() || line.front() == '#') continue;
      size_t eq = line.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;  // setenv refuses an empty name
      std::string name(line.substr(0, std::min<size_t>(eq, 1023)));
      std::string value(line.substr(eq + 1, 1023));
      // setenv(name, value, 0): the environment and earlier files win.
      if (conf.env.try_emplace(name, value).second) conf.from.emplace(name, path);
    }
  };
  const std::string* user = env_get(env, "NCCL_CONF_FILE");
  if (user != nullptr && !user->empty()) {
    apply(*user);
  } else if (const std::string* home = env_get(env, "HOME")) {
    apply(*home + "/.nccl.conf");
  }
  apply("/etc/nccl.conf");
  return conf;
}

}  // namespace rankcheck::nccl
