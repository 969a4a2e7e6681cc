// NCCL's log lines (nccl/log_line.h): the prefix of every line and a WARN's marker.

#include <catch2/catch.hpp>

#include "nccl/log_line.h"

using namespace rankcheck;

TEST_CASE("NCCL's line prefix: host, pid, tid and the CUDA device") {
  nccl::LogPrefix p = nccl::read_log_prefix("gpu-01:4242:4250 [3] NCCL INFO Bootstrap: Using eth0");
  CHECK(p.host == "gpu-01");
  CHECK(p.pid == 4242);
  CHECK(p.tid == 4250);
  CHECK(p.dev == 3);
  CHECK(p.length == std::string_view("gpu-01:4242:4250 [3] ").size());
  CHECK(nccl::read_log_prefix("gpu-01:4242 [3] NCCL INFO").length == 0);  // no tid
  CHECK(nccl::read_log_prefix("ValueError: x").length == 0);
}

TEST_CASE("NCCL's WARN marker and the source file before it") {
  std::string_view line = "h:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to";
  size_t at = nccl::warn_marker_at(line);
  REQUIRE(at != std::string_view::npos);
  CHECK(nccl::warn_source_file(line.substr(0, at)) == "misc/socket.cc");
  // 2.30 names the function; a build may log its full path.
  CHECK(nccl::warn_source_file("h:1:2 [0] misc/socket.cc:484 (ncclSocketConnect)") ==
        "misc/socket.cc");
  CHECK(nccl::warn_source_file("h:1:2 [0] /build/nccl/src/init.cc:12") == "init.cc");
  // An old NCCL's bare "file.h:LINE WARN".
  CHECK(nccl::warn_marker_at("h:1:2 [0] include/socket.h:423 WARN Net : Connect") !=
        std::string_view::npos);
  CHECK(nccl::warn_marker_at("a WARN that is not NCCL's") == std::string_view::npos);
}
