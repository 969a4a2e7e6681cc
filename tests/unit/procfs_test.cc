#include "host/procfs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

using namespace rankcheck;
namespace fs = std::filesystem;

namespace {

// A /proc of the test's own making, removed at the end.
struct FakeProc {
  FakeProc() {
    std::string pattern = (fs::temp_directory_path() / "rankcheck-proc-XXXXXX").string();
    root = ::mkdtemp(pattern.data());
  }
  ~FakeProc() { fs::remove_all(root); }
  void put(const std::string& path, const std::string& text) const {
    fs::create_directories((fs::path(root) / path).parent_path());
    std::ofstream(fs::path(root) / path) << text;
  }
  std::string root;
};

}  // namespace

TEST_CASE("procfs: reads somaxconn, this process's memory and the NVIDIA banner") {
  FakeProc proc;
  ProcFs p{proc.root};
  CHECK(!p.somaxconn());
  CHECK(p.self_memory().peak_kib == -1);  // unknown: never 0 KiB
  CHECK(p.nvidia_version_banner().empty());
  proc.put("sys/net/core/somaxconn", "4096\n");
  proc.put("self/status", "Name:\trankcheck\nVmHWM:\t   2048 kB\nVmRSS:\t   1536 kB\n");
  proc.put("driver/nvidia/version",
           "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
           "GCC version: gcc 12\n");
  CHECK(p.somaxconn() == 4096);
  CHECK(p.self_memory().peak_kib == 2048);
  CHECK(p.self_memory().rss_kib == 1536);
  CHECK(p.nvidia_version_banner() ==
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build");
}
