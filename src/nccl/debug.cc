// Where NCCL writes its words, read in NVIDIA/nccl src/debug.cc at v2.18.6-1 and
// v2.28.9-1.

#include "nccl/debug.h"

#include <fmt/format.h>
#include <strings.h>

namespace rankcheck {
namespace {

// The subsystems NCCL 2.28 logs at INFO when NCCL_DEBUG_SUBSYS is unset (debug.cc:
// INIT, BOOTSTRAP, ENV), and NET with them: "Using network IB" is an INIT line, and
// NET's say which device ("NET/IB : Using [0]mlx5_0:1/IB").
constexpr const char* kUsersSubsys = "INIT,BOOTSTRAP,ENV,NET";
// Ours, where the level is ours too: the network's choice and init, nothing more.
constexpr const char* kOwnSubsys = "INIT,NET";

const std::string* given(const EnvMap& env, std::string_view key) {
  const std::string* v = env_get(env, key);
  return v != nullptr && !v->empty() ? v : nullptr;
}

}  // namespace

std::string expand_nccl_debug_file(std::string_view pattern, std::string_view host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == '%') {
      out += '%';
    } else if (c == 'h') {
      out += host;
    } else if (c == 'p') {
      out += std::to_string(pid);
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

NcclDebugPlan nccl_debug_plan(const EnvMap& env, std::string_view host, long pid,
                              bool (*holds_a_log)(const std::string& path)) {
  NcclDebugPlan plan;
  const std::string* level = given(env, "NCCL_DEBUG");
  if (level == nullptr) plan.set.emplace_back("NCCL_DEBUG", "INFO");
  std::string lv = level != nullptr ? *level : "INFO";
  auto is = [&lv](const char* name) { return ::strcasecmp(lv.c_str(), name) == 0; };
  bool info = is("INFO") || is("TRACE");
  if (info && given(env, "NCCL_DEBUG_SUBSYS") == nullptr) {
    plan.set.emplace_back("NCCL_DEBUG_SUBSYS", level != nullptr ? kUsersSubsys : kOwnSubsys);
  }
  // The user's file counts only with the user's level, and only at a level NCCL
  // opens a file for (debug.cc: WARN, INFO, ABORT, TRACE; not VERSION, nor a value it
  // does not know): otherwise NCCL writes nothing there, and what is there is not
  // this run's.
  const std::string* file = given(env, "NCCL_DEBUG_FILE");
  if (level != nullptr && file != nullptr && (info || is("WARN") || is("ABORT"))) {
    std::string path = expand_nccl_debug_file(*file, host, pid);
    if (holds_a_log == nullptr || !holds_a_log(path)) {
      plan.path = path;
      plan.users_file = true;
      plan.own_lines = fmt::format("{}:{}:", host, pid);
      return plan;
    }
    // NCCL would empty it (fopen "w"): a failed job's log, the one diagnose reads.
    plan.note = fmt::format(
        "NCCL_DEBUG_FILE={} names {}, which holds a log already: left as it is, and the GPU "
        "stage's NCCL writes to a file of rankcheck's own (its lines on stderr after the "
        "stage; put %p in the name for a file a process)",
        *file, path);
  }
  const std::string* tmp = given(env, "TMPDIR");
  plan.path = fmt::format("{}/rankcheck-nccl-{}-XXXXXX.log", tmp != nullptr ? *tmp : "/tmp", pid);
  plan.echo = level != nullptr;
  return plan;
}

std::string escape_nccl_debug_file(std::string_view path) {
  std::string out;
  for (char c : path) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

}  // namespace rankcheck
