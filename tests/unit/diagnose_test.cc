#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <rankcheck/diagnose.h>

using namespace rankcheck;
using namespace rankcheck::diagnose;

namespace {

Diagnosis diagnose_lines(const std::vector<std::string>& lines, const std::string& name = "job.log") {
  Scanner s;
  s.begin_source(name);
  for (const std::string& l : lines)
    s.line(l);
  return s.finish();
}

}  // namespace

TEST_CASE("diagnose: every catalogue row compiles, and names a field per capture group") {
  for (const Pattern& p : catalogue()) {
    INFO(p.name);
    CHECK(!p.name.empty());
    CHECK(p.name.find('-') == std::string_view::npos);  // row keys are not finding ids
    CHECK(!p.component.empty());
    CHECK(!p.source.empty());
    std::vector<Field> fields = parse_extracts(p.extracts);
    if (p.regex.empty()) continue;
    std::regex re(std::string(p.regex), std::regex::ECMAScript);
    CHECK(re.mark_count() == fields.size());
  }
  CHECK_THROWS_AS(parse_extracts("rank,nonsense"), std::invalid_argument);
}

TEST_CASE("diagnose: prefixes name the process") {
  struct Row {
    std::string line;
    long rank, local_rank, pid;
    std::string host, time, body;
  };
  const Row rows[] = {
      {"12: ncclInvalidUsage", 12, -1, -1, "", "", "ncclInvalidUsage"},
      {"  3: x", 3, -1, -1, "", "", "x"},
      {"[default3]:hello", -1, 3, -1, "", "", "hello"},
      {"[rank5]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 5] boom", 5, -1, -1, "",
       "E1218 20:27:21.426415540", "[Rank 5] boom"},
      {"[1,3]<stdout>:smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5", 3, -1, 29881,
       "smc-gpu-03", "", "NCCL INFO init.cc:903 -> 5"},
      {"[2025-03-01 12:00:00] gpu-01:77:78 [1] misc/socket.cc:50 NCCL WARN x", -1, -1, 77, "gpu-01",
       "2025-03-01 12:00:00", "misc/socket.cc:50 NCCL WARN x"},
      {"10.0.0.3: gpu-7:12:13 [0] NCCL INFO y", -1, -1, 12, "gpu-7", "", "NCCL INFO y"},
      {"W1010 11:39:41.458000 140602427192448 torch/distributed/run.py:757] msg", -1, -1, -1, "",
       "W1010 11:39:41.458000", "msg"},
      {"srun: error: node017: task 3: Exited with exit code 1", -1, -1, -1, "", "",
       "srun: error: node017: task 3: Exited with exit code 1"},
      {"ValueError: bad", -1, -1, -1, "", "", "ValueError: bad"},
      {"    [rank7]:text", 7, -1, -1, "", "", "text"},
  };
  for (const Row& r : rows) {
    INFO(r.line);
    Prefix p = parse_prefix(r.line);
    CHECK(p.rank == r.rank);
    CHECK(p.local_rank == r.local_rank);
    CHECK(p.pid == r.pid);
    if (!r.host.empty() || p.launchers != Prefix::kPdsh) CHECK(std::string(p.host) == r.host);
    CHECK(std::string(p.time) == r.time);
    CHECK(r.line.substr(p.body) == r.body);
  }
  CHECK(next_process_prefix("[default0]:a [default1]:b", 1) == 13);
  CHECK(next_process_prefix("[0] NCCL INFO [x]", 1) == std::string::npos);
}

TEST_CASE("diagnose: a setup error leads, whatever else the ranks say") {
  Diagnosis d = diagnose_lines({
      "[rank1]: RuntimeError: [../third_party/gloo] Connection closed by peer [10.0.0.2]:4242",
      "[1,2]<stdout>:gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 "
      "and rank 0 both on CUDA device 1000",
  });
  REQUIRE(d.findings.size() >= 2);
  CHECK(d.findings[0].finding.id == "duplicate-gpu");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.ranks == std::vector<long>{0, 2});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"gpu-03"});
  CHECK(d.findings[0].first_seen == "job.log:2");
  CHECK(d.findings[1].finding.id == "peer-failed");
  CHECK_FALSE(d.findings[1].initiating);
  CHECK(d.exit_code() == exit_code::kMismatch);
}

TEST_CASE("diagnose: the first srun task to fail initiates; the ones it took down follow") {
  Diagnosis d = diagnose_lines({
      "3: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
      "0: RuntimeError: NCCL communicator was aborted on rank 0.",
      "srun: error: node02: task 3: Exited with exit code 1",
      "srun: error: node01: tasks 0-2: Exited with exit code 1",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.id == "process-died");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{3});
  CHECK(d.findings[0].finding.message ==
        "rank 3 on node02 failed: CUDA out of memory. Tried to allocate 2.00 GiB and exited with code 1");
  CHECK(d.launcher == "slurm");
  CHECK(d.verify_with == "srun --ntasks 4 rankcheck run --timeout 120");
  for (size_t i = 1; i < d.findings.size(); ++i)
    CHECK_FALSE(d.findings[i].initiating);
}

TEST_CASE("diagnose: a time limit ends the job; what follows is downstream") {
  Diagnosis d = diagnose_lines({
      "slurmstepd: error: *** STEP 4821.0 ON node01 CANCELLED AT 2024-05-07T15:51:09 DUE TO TIME "
      "LIMIT ***",
      "srun: error: node01: tasks 0-3: Killed",
  });
  REQUIRE(d.findings.size() == 2);
  CHECK(d.findings[0].finding.id == "job-cancelled");
  CHECK(d.findings[0].finding.message ==
        "the scheduler cancelled 4821.0 on node01 at 2024-05-07T15:51:09 DUE TO TIME LIMIT");
  CHECK(d.findings[1].finding.id == "process-died");
  CHECK_FALSE(d.findings[1].initiating);
  CHECK(d.exit_code() == exit_code::kIncomplete);
}

TEST_CASE("diagnose: watchdog timeouts in different collectives are a desync") {
  Diagnosis d = diagnose_lines({
      "[rank0]:[E816 01:45:40.1 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
      "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
      "[rank1]:[E816 01:45:40.1 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective "
      "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
      "[rank2]:[E816 01:45:40.1 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective "
      "operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.id == "collective-desync");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2});
  CHECK(d.exit_code() == exit_code::kGpu);
}

TEST_CASE("diagnose: a lost peer with no error of its own anywhere is peer-failed") {
  Diagnosis d = diagnose_lines({
      "[rank0]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was "
      "a network error, NCCL version 2.21.5",
  });
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].finding.id == "peer-failed");
  CHECK(d.findings[0].initiating);
}

TEST_CASE("diagnose: torchrun's closing signal marks the survivors, not the culprit") {
  Diagnosis d = diagnose_lines({
      "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 101 closing signal SIGTERM",
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: "
      "102) of binary: /usr/bin/python3",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.id == "process-died");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.message.find("local rank 1 was killed by signal 9 (SIGKILL)") == 0);
}

TEST_CASE("diagnose: ranks that waited name the ones that never came") {
  Diagnosis d = diagnose_lines({
      "0: RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for "
      "key: store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)",
      "1: RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for "
      "key: store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.id == "missing-rank");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2, 3});
  CHECK(d.exit_code() == exit_code::kIncomplete);
}

TEST_CASE("diagnose: ranks that waited for different world sizes disagree on it") {
  Diagnosis d = diagnose_lines({
      "0: Timed out initializing process group in store based barrier on rank 0, for key: k "
      "(world_size=2, num_workers_joined=2, timeout=0:00:10 error=x)",
      "1: Timed out initializing process group in store based barrier on rank 1, for key: k "
      "(world_size=3, num_workers_joined=2, timeout=0:00:10 error=x)",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.id == "world-size-mismatch");
  CHECK(d.findings[0].finding.message ==
        "the ranks disagree on the world size: rank 0 waited for 2 and rank 1 waited for 3");
}

TEST_CASE("diagnose: memory is bounded by findings, not lines") {
  Scanner s;
  s.begin_source("big.log");
  for (int i = 0; i < 200000; ++i)
    s.line("[rank0]: RuntimeError: Connection reset by peer");
  Diagnosis d = s.finish();
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].evidence.size() <= 3);
  CHECK(d.lines == 200000);
  CHECK(d.matched == 200000);
}

TEST_CASE("diagnose: nothing recognised is exit 0") {
  Diagnosis d = diagnose_lines({"epoch 1 loss 2.3", "[default0]:step 4"});
  CHECK(d.findings.empty());
  CHECK(d.exit_code() == exit_code::kPass);
}
