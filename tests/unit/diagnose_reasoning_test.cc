// diagnose's reasoning across lines and files, fourth round: a rank started twice, the
// kernel's OOM victim tied to its rank by pid, NCCL's return trace and an exit status of
// 137 as failures of their own, a worker's re-raised traceback read by its last line.
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "diagnose/diagnose.h"

using namespace rankcheck::diagnose;

namespace {

// Each file: its name, then its lines, read in that order.
Diagnosis diagnose_files(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& files) {
  Scanner s;
  for (const auto& [name, lines] : files) {
    s.begin_source(name);
    for (const std::string& l : lines)
      s.line(l);
  }
  return s.finish();
}

}  // namespace

TEST_CASE("diagnose: a rank that two processes start as is duplicate-rank") {
  Diagnosis d = diagnose_files({{"slurm.out",
                                 {
                                     "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4",
                                     "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4",
                                     "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4",
                                     "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4",
                                     "Traceback (most recent call last):",
                                     "RuntimeError: Timed out initializing process group",
                                 }}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "duplicate-rank");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.message.find("ranks 0-1") != std::string::npos);
  CHECK(d.findings[0].finding.ranks == std::vector<long>{0, 1});
}

TEST_CASE("diagnose: a rank started again after a failure is a restart, not a duplicate") {
  Diagnosis d = diagnose_files({{"slurm.out",
                                 {
                                     "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
                                     "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2",
                                     "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                     "allocate 2.00 GiB",
                                     "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
                                     "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2",
                                 }}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "gpu-out-of-memory");
  for (const auto& f : d.findings)
    CHECK(f.finding.name() != "duplicate-rank");
}

TEST_CASE("diagnose: each rank said once is no duplicate") {
  Diagnosis d = diagnose_files({{"job.log",
                                 {
                                     "Added key: store_based_barrier_key:1 to store for rank: 0",
                                     "Added key: store_based_barrier_key:1 to store for rank: 1",
                                     "Added key: store_based_barrier_key:2 to store for rank: 0",
                                     "Added key: store_based_barrier_key:2 to store for rank: 1",
                                 }}});
  CHECK(d.findings.empty());
  CHECK(d.exit_code() == 0);
}

TEST_CASE("diagnose: the kernel's OOM victim is the rank mpirun names with its pid") {
  Diagnosis d = diagnose_files(
      {{"batch.log",
        {
            "mpirun noticed that process rank 12 with PID 96380 on node n1 exited on signal 9 "
            "(Killed).",
            "mpirun noticed that process rank 38 with PID 94191 on node n3 exited on signal 9 "
            "(Killed).",
        }},
       {"n3-messages.log",
        {
            "May 23 01:40:04 n3 [7456668.526985] Out of memory: Kill process 94191 (python3) "
            "score 36 or sacrifice child",
            "May 23 01:40:04 n3 [7456668.527385] Killed process 94191 (python3), UID 1011, "
            "total-vm:9143392kB, anon-rss:7142588kB",
        }}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "host-out-of-memory");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{38});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"n3"});
}

TEST_CASE("diagnose: NCCL's return trace and an exit status of 137 are never nothing found") {
  Diagnosis trace = diagnose_files({{"nccl.log",
                                     {
                                         "node1:2330:2658 [2] NCCL INFO Using network IB",
                                         "node1:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2",
                                         "node1:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2",
                                     }}});
  REQUIRE(trace.findings.size() == 1);
  // NCCL's socket code failed: by its file, the network, though no row reads the words.
  CHECK(trace.findings[0].finding.name() == "nccl-network-error");
  CHECK(trace.findings[0].finding.hosts == std::vector<std::string>{"node1"});
  CHECK(trace.exit_code() != 0);
  trace = diagnose_files({{"nccl.log", {"node1:2330:2658 [2] NCCL INFO init.cc:1270 -> 3"}}});
  REQUIRE(trace.findings.size() == 1);
  CHECK(trace.findings[0].finding.name() == "unexplained-error");
  // A healthy job's INFO narration with an arrow is not a failure.
  Diagnosis healthy = diagnose_files(
      {{"nccl.log",
        {"node1:2330:2658 [2] NCCL INFO Channel 00/02 :    0   1 -> 0 [send] via NET/IB/0"}}});
  CHECK(healthy.findings.empty());

  Diagnosis killed = diagnose_files({{"pod.log",
                                      {
                                          "Training process finished. Exit code: 137",
                                          "Job exited with error code 137",
                                      }}});
  REQUIRE_FALSE(killed.findings.empty());
  CHECK(killed.findings[0].finding.name() == "process-died");
  CHECK(killed.findings[0].finding.message.find("137") != std::string::npos);
}

TEST_CASE("diagnose: a worker's traceback re-raised is read by its last line") {
  Diagnosis d = diagnose_files(
      {{"notebook.log",
        {
            "RuntimeError: Traceback (most recent call last):",
            "  File \"/opt/conda/lib/python3.6/site-packages/torch/storage.py\", line 122, in "
            "_new_shared",
            "    return cls._new_using_fd(size)",
            "RuntimeError: unable to write to file </torch_1509_1969058146>",
        }}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "shared-memory-exhausted");
}

TEST_CASE("diagnose: NCCL on loopback or link-local in a job across hosts is named first") {
  Diagnosis lo = diagnose_files(
      {{"job.log",
        {
            "h1:100:100 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
            "h2:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            "h2:200:300 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            "127.0.0.1<43567> failed : Connection refused",
        }}});
  REQUIRE_FALSE(lo.findings.empty());
  CHECK(lo.findings[0].finding.name() == "nccl-interface-loopback");
  CHECK(lo.findings[0].finding.hosts == std::vector<std::string>{"h1"});

  Diagnosis ll = diagnose_files(
      {{"job.log",
        {
            "h1:100:100 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB "
            "ib0:fe80::1e34:da03:2b:c1f0%ib0<0>",
            "h2:200:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.2<0>",
            "h2:200:300 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            "fe80::1e34:da03:2b:c1f0%ib0<43567> failed : Software caused connection abort",
        }}});
  REQUIRE_FALSE(ll.findings.empty());
  CHECK(ll.findings[0].finding.name() == "nccl-interface-link-local");
  CHECK(ll.findings[0].finding.hosts == std::vector<std::string>{"h1"});

  // One host alone may use lo: nothing to say of it.
  Diagnosis one = diagnose_files(
      {{"job.log", {"h1:100:100 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>"}}});
  CHECK(one.findings.empty());
}

TEST_CASE("diagnose: a crash's own marks are failures: a signal by name, native frames") {
  for (const std::vector<std::string>& lines : std::vector<std::vector<std::string>>{
           {"*** SIGSEGV received at time=1707229696 on cpu 41 ***",
            "PC: @     0x7f67e83f32b0  (unknown)  report_streaming_generator_output()"},
           {"[gcs_server.out] /opt/ray/core/src/ray/gcs/gcs_server(+0xab681a) [0x55a1d8f1181a]"},
           {"[2025-01-17 16:19:49,107 C 4876 4876] container_util.h:156: Key 7 doesn't exist",
            "*** StackTrace Information ***"},
       }) {
    INFO(lines.front());
    Diagnosis d = diagnose_files({{"worker.err", lines}});
    REQUIRE_FALSE(d.findings.empty());
    CHECK(d.exit_code() != 0);
  }
}

TEST_CASE("diagnose: a template still matches where a quoted log lost a double space") {
  // NCCL prints "address %s with" of an empty address as two spaces; a chat kept one.
  Diagnosis d = diagnose_files(
      {{"job.log",
        {"ncclSocketInit: connecting to address with family 0 is neither AF_INET(2) nor "
         "AF_INET6(10)"}}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-init-failed");
}

TEST_CASE("diagnose: a Ray node's raylet or GCS dying is the node lost, a worker's is not") {
  Diagnosis raylet = diagnose_files(
      {{"raylet.err",
        {"(raylet, ip=172.31.14.65) [2021-07-02 23:25:15,081 C 86 86] cluster_task_manager.cc:939: "
         " Check failed: node_info_opt Spilling back to a node manager"}}});
  REQUIRE_FALSE(raylet.findings.empty());
  CHECK(raylet.findings[0].finding.name() == "node-lost");
  CHECK(raylet.findings[0].finding.hosts == std::vector<std::string>{"172.31.14.65"});

  Diagnosis gcs = diagnose_files({{"gcs_server.out",
                                   {"/home/ray/anaconda3/lib/python3.10/site-packages/ray/core/src/"
                                    "ray/gcs/gcs_server(+0xab681a)"
                                    " [0x55a1d8f1181a] ray::RayLog::~RayLog()"}}});
  REQUIRE_FALSE(gcs.findings.empty());
  CHECK(gcs.findings[0].finding.name() == "node-lost");

  Diagnosis worker = diagnose_files(
      {{"worker.err",
        {"(RayWorkerWrapper pid=2345, ip=10.0.0.2) [2025-03-21 00:01:19,595 C 338 338] "
         "core_worker.cc:100:  Check failed: x"}}});
  REQUIRE_FALSE(worker.findings.empty());
  CHECK(worker.findings[0].finding.name() == "process-died");
}

TEST_CASE("diagnose: an IB completion error names both ends and what its status means") {
  Diagnosis d = diagnose_files(
      {{"job.log",
        {"task-646:91:123 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
         "peer 172.17.127.143<49577> with error 12, opcode 1, len 0, vendor err 129"}}});
  REQUIRE_FALSE(d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-network-error");
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"172.17.127.143", "task-646"});
  CHECK(d.findings[0].finding.message.find("transport retries exceeded") != std::string::npos);
}
