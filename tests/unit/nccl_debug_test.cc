#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diagnose/diagnose.h"
#include "gpu/nccl_debug_file.h"

using namespace rankcheck;

namespace {

std::string value_of(const NcclDebugPlan& p, const std::string& key) {
  for (const auto& [k, v] : p.set) {
    if (k == key) return v;
  }
  return "(unset)";
}

size_t entries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The NCCL variables as they were, put back at the end of a test that sets them.
struct KeepNcclEnv {
  KeepNcclEnv() {
    for (const char* k : kKeys) {
      const char* v = std::getenv(k);
      saved.emplace_back(k, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~KeepNcclEnv() {
    for (const auto& [k, v] : saved) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }
  static constexpr const char* kKeys[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
};

}  // namespace

TEST_CASE(
    "nccl debug: where the user set nothing, NCCL writes INFO of init and net to a file of ours") {
  NcclDebugPlan p = nccl_debug_plan(EnvMap{{"TMPDIR", "/scratch/t"}}, "gpu-01", 4242);
  CHECK(value_of(p, "NCCL_DEBUG") == "INFO");
  CHECK(value_of(p, "NCCL_DEBUG_SUBSYS") == "INIT,NET");
  CHECK(p.path == "/scratch/t/rankcheck-nccl-4242-XXXXXX.log");
  CHECK(!p.users_file);
  CHECK(!p.echo);
  CHECK(nccl_debug_plan(EnvMap{}, "h", 7).path == "/tmp/rankcheck-nccl-7-XXXXXX.log");
}

TEST_CASE("nccl debug: the user's level is kept, and their lines printed after the stage") {
  NcclDebugPlan p = nccl_debug_plan(EnvMap{{"NCCL_DEBUG", "info"}}, "gpu-01", 1);
  CHECK(value_of(p, "NCCL_DEBUG") == "(unset)");
  // NCCL's own default subsystems, and NET: nothing the user would have seen is lost.
  CHECK(value_of(p, "NCCL_DEBUG_SUBSYS") == "INIT,BOOTSTRAP,ENV,NET");
  CHECK(!p.users_file);
  CHECK(p.echo);

  NcclDebugPlan warn = nccl_debug_plan(EnvMap{{"NCCL_DEBUG", "WARN"}}, "gpu-01", 1);
  CHECK(warn.set.empty());  // no subsystems at WARN; the file is named once it is made
  CHECK(warn.echo);

  NcclDebugPlan subsys = nccl_debug_plan(EnvMap{{"NCCL_DEBUG_SUBSYS", "COLL"}}, "gpu-01", 1);
  CHECK(value_of(subsys, "NCCL_DEBUG") == "INFO");
  CHECK(value_of(subsys, "NCCL_DEBUG_SUBSYS") == "(unset)");
}

TEST_CASE("nccl debug: the user's file, with their level, is read where NCCL writes it") {
  NcclDebugPlan p = nccl_debug_plan(
      EnvMap{{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", "/logs/nccl.%h.%p.log"}}, "gpu-01", 77);
  CHECK(p.users_file);
  CHECK(!p.echo);
  CHECK(p.path == "/logs/nccl.gpu-01.77.log");
  CHECK(value_of(p, "NCCL_DEBUG_FILE") == "(unset)");

  // Without NCCL_DEBUG, NCCL would write nothing there: nothing is written there now.
  NcclDebugPlan alone = nccl_debug_plan(EnvMap{{"NCCL_DEBUG_FILE", "/logs/x"}}, "gpu-01", 77);
  CHECK(!alone.users_file);
  CHECK(alone.path == "/tmp/rankcheck-nccl-77-XXXXXX.log");
  // Given but empty is not given (NCCL then writes to stdout).
  CHECK(value_of(nccl_debug_plan(EnvMap{{"NCCL_DEBUG", ""}}, "h", 1), "NCCL_DEBUG") == "INFO");
}

TEST_CASE("nccl debug: %h, %p and %% expand as NCCL expands them") {
  CHECK(expand_nccl_debug_file("/l/%h-%p.%%.log", "gpu-01", 9) == "/l/gpu-01-9.%.log");
  CHECK(expand_nccl_debug_file("/l/%x%", "h", 9) == "/l/%x%");
}

TEST_CASE("nccl debug: a long file is read bounded, its start and its end, whole lines only") {
  char dir[] = "/tmp/rankcheck-unit-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/nccl.log";
  {
    std::ofstream out(path);
    out << "h:1:1 [0] NCCL INFO Using network IB\n";
    for (int i = 0; i < 5000; ++i)
      out << "h:1:1 [0] NCCL INFO Channel " << i << " filler filler filler filler\n";
    out << "h:1:2 [0] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed\n";
  }
  auto lines = read_bounded_lines(path, 4096, 1024);
  size_t bytes = 0;
  for (const std::string& l : lines)
    bytes += l.size() + 1;
  CHECK(bytes <= 4096);
  REQUIRE(lines.size() > 10);
  CHECK(lines.front() == "h:1:1 [0] NCCL INFO Using network IB");
  CHECK(lines.back() == "h:1:2 [0] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed");
  for (const std::string& l : lines)
    CHECK(l.rfind("h:1:", 0) == 0);  // no line cut in the middle

  auto all = read_bounded_lines(path);  // 64 KiB
  CHECK(all.front() == lines.front());
  CHECK(all.back() == lines.back());
  CHECK(read_bounded_lines(std::string(dir) + "/none").empty());
  std::remove(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("nccl debug: a file of ours is made private, named to NCCL, and never left behind") {
  KeepNcclEnv keep;
  char dir[] = "/tmp/rankcheck-unit-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string made;
  {
    std::string why;
    NcclDebugFile f(nccl_debug_plan(EnvMap{{"TMPDIR", dir}}, "h", 31), &why);
    CHECK(why.empty());
    REQUIRE(f.active());
    made = f.plan().path;
    // Unlinked at once: a SIGKILL leaves nothing in TMPDIR; NCCL opens it through
    // this process's descriptor.
    CHECK(made.rfind("/proc/self/fd/", 0) == 0);
    CHECK(entries(dir) == 0);
    CHECK(exists(made));
    CHECK(std::string(std::getenv("NCCL_DEBUG_FILE")) == made);
    CHECK(std::string(std::getenv("NCCL_DEBUG")) == "INFO");
    CHECK(std::string(std::getenv("NCCL_DEBUG_SUBSYS")) == "INIT,NET");
    std::ofstream(made) << "h:31:31 [0] NCCL INFO Using network Socket\n";  // as NCCL's fopen
    CHECK(diagnose::read_nccl_words(f.read()).network == "Socket");
  }
  CHECK(!exists(made));

  // Where no file can be made, nothing is set and the reason is given.
  ::unsetenv("NCCL_DEBUG");
  std::string why;
  NcclDebugFile none(nccl_debug_plan(EnvMap{{"TMPDIR", "/nonexistent/x"}}, "h", 31), &why);
  CHECK(!none.active());
  CHECK(why.find("cannot make a file for NCCL's messages") != std::string::npos);
  CHECK(std::getenv("NCCL_DEBUG") == nullptr);

  // The user's file is left where it is.
  std::string theirs = std::string(dir) + "/theirs.log";
  std::ofstream(theirs) << "h:31:31 [0] NCCL INFO Using network IB\n";
  {
    NcclDebugFile f(
        nccl_debug_plan(EnvMap{{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", theirs}}, "h", 31),
        &why);
    CHECK(diagnose::read_nccl_words(f.read()).network == "IB");
  }
  CHECK(exists(theirs));
  std::remove(theirs.c_str());

  // A file that processes share (no %p): each reads its own lines only, even after a
  // time stamp; another process's warning is not this one's.
  std::string shared = std::string(dir) + "/shared.log";
  std::ofstream(shared) << "h:32:32 [1] misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp "
                           "failed with 110 Connection timed out\n"
                           "[2026-12-06 10:00:00] h:31:31 [0] NCCL INFO Using network IB\n"
                           "xh:31:9 [0] NCCL INFO Using network Socket\n";
  {
    NcclDebugFile f(
        nccl_debug_plan(EnvMap{{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", shared}}, "h", 31),
        &why);
    std::vector<std::string> lines = f.read();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("Using network IB") != std::string::npos);
    CHECK(diagnose::read_nccl_words(lines).warn.empty());
  }
  std::remove(shared.c_str());
  ::rmdir(dir);
}

TEST_CASE("nccl debug: the user's file only where NCCL writes it, and never a log it would empty") {
  EnvMap env{{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", "/logs/job.log"}};
  NcclDebugPlan p = nccl_debug_plan(env, "gpu-01", 77);
  CHECK(p.users_file);
  CHECK(p.own_lines == "gpu-01:77:");
  CHECK(p.note.empty());

  // A log is there already (a failed job's, which diagnose reads): NCCL's fopen "w"
  // would empty it. Left alone; a file of our own, its lines echoed; said why.
  NcclDebugPlan full = nccl_debug_plan(
      env, "gpu-01", 77, [](const std::string& path) { return path == "/logs/job.log"; });
  CHECK(!full.users_file);
  CHECK(full.echo);
  CHECK(full.path == "/tmp/rankcheck-nccl-77-XXXXXX.log");
  CHECK(full.note.find("names /logs/job.log, which holds a log already") != std::string::npos);

  // NCCL opens no file at VERSION, nor at a level it does not know: what is in the
  // user's file is not this run's.
  for (const char* level : {"VERSION", "verbose"}) {
    NcclDebugPlan v = nccl_debug_plan(
        EnvMap{{"NCCL_DEBUG", level}, {"NCCL_DEBUG_FILE", "/logs/job.log"}}, "gpu-01", 77);
    CHECK(!v.users_file);
    CHECK(v.path == "/tmp/rankcheck-nccl-77-XXXXXX.log");
  }
  for (const char* level : {"WARN", "abort", "TRACE"}) {
    CHECK(nccl_debug_plan(EnvMap{{"NCCL_DEBUG", level}, {"NCCL_DEBUG_FILE", "/logs/j"}}, "h", 1)
              .users_file);
  }
}
