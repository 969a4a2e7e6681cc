#include "diagnose/diagnose.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include "base/text.h"
#include "diagnose/internal.h"

using namespace rankcheck;
using namespace rankcheck::diagnose;

namespace {

Diagnosis diagnose_lines(const std::vector<std::string>& lines,
                         const std::string& name = "job.log") {
  Scanner s;
  s.begin_source(name);
  for (const std::string& l : lines)
    s.line(l);
  return s.finish();
}

}  // namespace

TEST_CASE("diagnose: every catalogue row compiles, and names a field per capture group") {
  for (const Pattern& p : hand_rows()) {
    INFO(p.name);
    CHECK(!p.name.empty());
    CHECK(p.name.find('-') == std::string_view::npos);  // row keys are not finding ids
    CHECK(!p.component.empty());
    CHECK(!p.source.empty());
    std::vector<LineField> fields = parse_extracts(p.extracts);
    if (p.regex.empty()) continue;
    std::regex re(std::string(p.regex), std::regex::ECMAScript);
    CHECK(re.mark_count() == fields.size());
  }
  CHECK_THROWS_AS(parse_extracts("rank,nonsense"), std::invalid_argument);
}

TEST_CASE("diagnose: every row read from a program's source has its program, source and text") {
  REQUIRE(source_rows().size() > 1000);
  size_t nccl = 0;
  for (const SourceRow& r : source_rows()) {
    INFO(r.source << ": " << r.text);
    CHECK(!r.program.empty());
    CHECK(!r.source.empty());
    CHECK(!r.versions.empty());
    CHECK(r.weight > 0);
    nccl += r.program == "NCCL";
  }
  CHECK(nccl > 500);
}

TEST_CASE("diagnose: an NCCL WARN is read by its file's templates, or by its file's subsystem") {
  Diagnosis d = diagnose_lines({
      "gpu-07:4242:4260 [3] transport/net_ib.cc:1480 NCCL WARN NET/IB : Got completion from "
      "peer 10.0.0.9<48211> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-network-error");
  // A WARN text no tag of NCCL has, from the IB transport: still the network.
  d = diagnose_lines({
      "gpu-07:4242:4260 [3] transport/net_ib.cc:99 NCCL WARN NET/IB : something new happened",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-network-error");
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"gpu-07"});
}

TEST_CASE("diagnose: a launch error no prefix names is the one process that died with it") {
  Diagnosis d = diagnose_lines({
      "*** An error occurred in MPI_Init",
      "*** on a NULL communicator",
      "srun: error: hpl: task 0: Exited with exit code 1",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{0});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"hpl"});
  // Two processes died: which one printed it, the log does not say.
  d = diagnose_lines({
      "*** An error occurred in MPI_Init",
      "srun: error: hpl: task 0: Exited with exit code 1",
      "srun: error: hpl2: task 1: Exited with exit code 1",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].finding.hosts.empty());
}

TEST_CASE("diagnose: SIGBUS is shared memory the kernel could not give") {
  // A worker ended by signal 7 with no words: a full /dev/shm, not a crash.
  Diagnosis d = diagnose_lines(
      {"The worker fails with {0: ProcessFailure(local_rank=0, pid=54, exitcode=-7, "
       "error_file='<N/A>', error_file_data={'message': '<NONE>'}, message='Signal 7 (SIGBUS) "
       "received by PID 54', timestamp=1711419181)}"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "shared-memory-exhausted");
  d =
      diagnose_lines({"[gpu-7:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical "
                      "address)"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "shared-memory-exhausted");
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"gpu-7"});
  // glibc's malloc finding its heap corrupted: the process's own crash.
  d = diagnose_lines({"[rank2]: free(): double free detected in tcache 2"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2});
  // A command the launcher ran by its path, not there: the launch failed.
  d = diagnose_lines({"bash: ./hydra_pmi_proxy: No such file or directory"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
}

TEST_CASE("diagnose: a connection to 127.0.1.1 is a host name that maps to loopback") {
  Diagnosis d = diagnose_lines({
      "terminate called after throwing an instance of 'gloo::IoException'",
      "  what():  [gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: Connection refused",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-interface-loopback");
  d =
      diagnose_lines({"node1:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                      "127.0.1.1<45763> failed : Connection refused"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-interface-loopback");
  // Its address in a healthy line is not a failure.
  d = diagnose_lines({"node1:1:1 [0] NCCL INFO Bootstrap : Using eth0:127.0.1.1<0>"});
  CHECK(d.exit_code() == 0);
}

TEST_CASE("diagnose: ranks that never said they started, in a log that ends with no failure") {
  // 4 of 8 ranks initialise and the log ends: the other four are missing.
  Diagnosis d = diagnose_lines({
      "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8",
      "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
      "initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/8",
      "initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "missing-rank");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{4, 5, 6, 7});
  CHECK(d.exit_code() != 0);
  // Every rank of the world: nothing to say.
  d = diagnose_lines({
      "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/2",
      "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2",
  });
  CHECK(d.findings.empty());
  CHECK(d.exit_code() == 0);
  // A failure in the log is what it names, not the ranks its log does not show.
  d = diagnose_lines({
      "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
      "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "gpu-out-of-memory");
}

TEST_CASE("diagnose: a failure no row explains is named, never nothing found") {
  // A process's own crash (a traceback cut before its exception) is that process's death.
  Diagnosis d = diagnose_lines({
      "[rank2]: Traceback (most recent call last):",
      "[rank2]:   File \"train.py\", line 3, in <module>",
      "[rank2]: frobnicate()",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2});
  CHECK(d.exit_code() != 0);
  d = diagnose_lines({"*** SIGSEGV received at time=1707229696 on cpu 41 ***"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  // A launcher's words: the job did not start.
  d = diagnose_lines({"sbatch: error: Invalid frobnication specification"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  d =
      diagnose_lines({"[mpiexec@head] HYDU_parse_array (utils/args/args.c:174): argument "
                      "matching returned error"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"head"});
  // Open MPI's TCP transport: the network between two processes.
  d =
      diagnose_lines({"[node1:06805] btl: tcp: Match incoming connection from [[27443,1],1] "
                      "10.0.0.4 with locally known IP 10.0.0.7 failed (iface 0/4)!"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "nccl-network-error");
  // A Python wrapper's exception that quotes a launcher: the launch failed.
  d =
      diagnose_lines({"submitit.core.utils.FailedJobError: sbatch: error: Parameter --frob=1 no "
                      "longer acceptable"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  // A Ray daemon's error: its node is lost.
  d =
      diagnose_lines({"(pid=gcs_server) E0412 18:43:30.090938599 302 tcp_server_posix.cc:216] "
                      "Failed accept4: Too many open files"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "node-lost");
  // The job step's container could not be set up, then its tasks exited: the launch
  // failed, on the hosts and ranks that then died.
  d = diagnose_lines({
      "slurmstepd: error: pyxis:     Failed to frobnicate the image - ABORTING!",
      "srun: error: node-1: task 0: Exited with exit code 1",
      "srun: error: node-2: task 1: Exited with exit code 1",
  });
  REQUIRE(d.findings.size() >= 2);
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.ranks == std::vector<long>{0, 1});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"node-1", "node-2"});
  CHECK_FALSE(d.findings[1].initiating);
  // A module that would not load, then the program's import error.
  d = diagnose_lines({
      "Lmod has detected the following error: The following module(s) are unknown: \"x\"",
      "Traceback (most recent call last):",
      "ImportError: No module named torch",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  // A process that crashed after the launcher's words is its own failure: the order decides.
  d = diagnose_lines({
      "srun: error: node-1: task 0: Exited with exit code 1",
      "slurmstepd: error: pyxis:     a late complaint",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  // The host of the shell prompt the output follows, where nothing else names one.
  d = diagnose_lines({"ubuntu@gpu-7:~$ python train.py", "*** SIGSEGV received at time=1 ***"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"gpu-7"});
  // Words inside words are not launchers' ("Aborted" holds "orted").
  d = diagnose_lines({"[rank1]: Fatal Python error: Aborted"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  // A failure of no shape stays what it is: unexplained, with its rank.
  d = diagnose_lines({"[rank3]: the frobnicator FAILED"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "unexplained-error");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{3});
  // A log that shows no failure at all is still a pass.
  d = diagnose_lines({"step 1 loss 2.3", "step 2 loss 2.1"});
  CHECK(d.findings.empty());
  CHECK(d.exit_code() == 0);
}

TEST_CASE("diagnose: launchers' help texts, runners' refusals and peers never met") {
  const std::string dashes(74, '-');
  // mpirun's (or prterun's) help text that no row reads: the launch failed.
  Diagnosis d = diagnose_lines({
      "$ mpirun -n 2 --frob hostname",
      dashes,
      "When frobnicating the command line, the result was not one mpirun can use:",
      "",
      "  Command line option: frob",
      dashes,
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].finding.message.find("When frobnicating") != std::string::npos);
  // A table between rules of another width (Lightning's model summary) is no help text.
  const std::string rule(60, '-');
  d = diagnose_lines({"  | Name  | Type   | Params", rule, "0 | model | ResNet | 11.7 M", rule,
                      "11.7 M    Trainable params"});
  CHECK(d.findings.empty());
  // A warning's help text in a job that ran is no failure.
  d = diagnose_lines({dashes, "WARNING: There is at least one frobnicator not in use.", dashes,
                      "step 1 loss 2.3"});
  CHECK(d.findings.empty());
  CHECK(d.exit_code() == 0);
  // A help text a row reads is that row's.
  d = diagnose_lines({dashes, "There are not enough slots available in the system to satisfy the 4",
                      "slots that were requested by the application:", dashes});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  CHECK(d.findings[0].finding.message.find("not enough slots") != std::string::npos);

  d = diagnose_lines({"ValueError: openmpi backend does not support limiting num nodes/gpus"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "launch-failed");
  d = diagnose_lines({"[0] DAPL startup: RLIMIT_MEMLOCK too small"});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "ib-memlock-low");
  // torchelastic's etcd rendezvous: a participant's lease ran out, its node is gone.
  d =
      diagnose_lines({"INFO 2020-08-18 05:27:18,490 Keep-alive key "
                      "/torchelastic/p2p/run_1/rdzv/v_4/rank_1 is not renewed.",
                      "INFO 2020-08-18 05:27:18,490 Rendevous version 4 is incomplete."});
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "node-lost");
  // Horovod's Gloo rendezvous: an uncaught exception whose what() is the wait for peers.
  d = diagnose_lines({
      "[1]<stderr>:terminate called after throwing an instance of 'gloo::IoException'",
      "[1]<stderr>:  what():  [horovod/common/gloo/http_store.cc:57] Wait timeout after 30 "
      "seconds for key(s): 0. You may want to increase the timeout via "
      "HOROVOD_GLOO_TIMEOUT_SECONDS",
      "[1]<stderr>:*** Received signal 6 ***",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "missing-rank");
}

TEST_CASE("diagnose: a host whose NCCL or network differs from the others' is named") {
  Diagnosis d = diagnose_lines({
      "h1:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
      "h2:22:22 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
      "h3:33:33 [0] NCCL INFO NCCL version 2.18.3+cuda12.1",
      "h1:11:11 [0] NCCL INFO Using network IB",
      "h2:22:22 [0] NCCL INFO Using network IB",
      "h3:33:33 [0] NCCL INFO Using network Socket",
  });
  REQUIRE(d.findings.size() == 2);
  CHECK(d.findings[0].finding.name() == "nccl-version-mismatch");
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"h3"});
  CHECK(d.findings[1].finding.name() == "nccl-net-mismatch");
  CHECK(d.findings[1].finding.hosts == std::vector<std::string>{"h3"});
  CHECK(d.networks.at("h3") == "Socket");
}

TEST_CASE("diagnose: a host that found no net plugin, in each NCCL's words", "[nccl_ib]") {
  // 2.19-2.20, 2.21-2.22, 2.23-2.25, 2.26-2.27, 2.28: the internal plugin used.
  for (const char* none :
       {"NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or "
        "directory No plugin found (libnccl-net.so), using internal implementation",
        "NET/Plugin: No plugin found (libnccl-net.so)",
        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
        "NET/Plugin: Could not find: libnccl-net.so"}) {
    CAPTURE(none);
    // Beside hosts that loaded one (the HPC-X plugin names its file as it starts):
    // the host without is named.
    Diagnosis d = diagnose_lines({
        "h1:11:11 [0] NCCL INFO " + std::string(none),
        "h2:22:22 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
        "h3:33:33 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    });
    REQUIRE(d.findings.size() == 1);
    CHECK(d.findings[0].finding.name() == "nccl-net-plugin-mismatch");
    CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"h1"});
    CHECK(d.findings[0].finding.message.find("internal on h1") != std::string::npos);
    // Alone, or on every host: a healthy job's narration.
    CHECK(diagnose_lines({"h1:11:11 [0] NCCL INFO " + std::string(none)}).findings.empty());
    CHECK(diagnose_lines({"h1:11:11 [0] NCCL INFO " + std::string(none),
                          "h2:22:22 [0] NCCL INFO " + std::string(none)})
              .findings.empty());
  }
  // The tuner's and profiler's plugins are not the network's.
  CHECK(diagnose_lines({"h1:11:11 [0] NCCL INFO TUNER/Plugin: Could not find: libnccl-tuner.so",
                        "h2:22:22 [0] NCCL INFO NET/Plugin: Loaded net plugin IB (v8)"})
            .findings.empty());
}

TEST_CASE("diagnose: NCCL's IB ports and plugin, compared across hosts", "[nccl_ib]") {
  Diagnosis d = diagnose_lines({
      "h1:11:11 [0] NCCL INFO NET/Plugin: Using internal network plugin.",
      "h2:22:22 [0] NCCL INFO NET/Plugin: Using internal network plugin.",
      "h3:33:33 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v10)",
      "h1:11:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB "
      "ib0:10.0.0.1<0>",
      "h2:22:22 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB "
      "eth0:10.0.0.2<0>",
  });
  const DiagFinding* link = nullptr;
  const DiagFinding* plugin = nullptr;
  for (const DiagFinding& f : d.findings) {
    if (f.finding.name() == "nccl-ib-link-layer-mismatch") link = &f;
    if (f.finding.name() == "nccl-net-plugin-mismatch") plugin = &f;
  }
  REQUIRE(link != nullptr);
  CHECK(link->finding.message ==
        "NCCL's IB transport used different link layers: IB on h1; RoCE on h2");
  REQUIRE(plugin != nullptr);
  CHECK(plugin->finding.hosts == std::vector<std::string>{"h3"});
  CHECK(plugin->finding.is_error());

  // Merged NICs (2.20+) count their ports; one host with fewer is a warning.
  Diagnosis c = diagnose_lines({
      "h1:11:11 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} ; OOB "
      "e:1<0>",
      "h2:22:22 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} ; OOB "
      "e:2<0>",
      "h3:33:33 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB e:3<0>",
  });
  REQUIRE(c.findings.size() == 1);
  CHECK(c.findings[0].finding.name() == "nccl-ib-port-count-mismatch");
  CHECK(c.findings[0].finding.hosts == std::vector<std::string>{"h3"});
  CHECK_FALSE(c.findings[0].finding.is_error());
}

TEST_CASE("diagnose: NCCL's own words in a process's debug file") {
  std::vector<std::string> lines = {
      "gpu-01:77:77 [0] NCCL INFO Using network IB",
      "",
      "gpu-01:77:90 [0] transport/net_ib.cc:777 NCCL WARN NET/IB : ibv_modify_qp failed with 110 "
      "Connection timed out, on dev mlx5_0:1, curr state INIT, next state RTR, local GID index 3",
  };
  NcclWords w = read_nccl_words(lines);
  CHECK(w.network == "IB");
  CHECK(w.finding == "nccl-network-error");
  CHECK(w.warn.rfind("NET/IB : ibv_modify_qp failed with 110", 0) == 0);
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
      {"2024-07-25T06:36:18.123456789Z [default1]:x", -1, 1, -1, "",
       "2024-07-25T06:36:18.123456789Z", "x"},
      {"2024-07-25 06:36:18,293 - torch - ERROR - y", -1, -1, -1, "", "2024-07-25 06:36:18,293",
       "- torch - ERROR - y"},
      {"2024-07-25T06:36:18+02:00 z", -1, -1, -1, "", "2024-07-25T06:36:18+02:00", "z"},
      {"2024-07-25 is a date", -1, -1, -1, "", "", "2024-07-25 is a date"},
      // A node's own daemon keeps its name before the text (its fatal line is the node's).
      {"(raylet, ip=10.0.3.179) node_manager.cc:2966: low", -1, -1, -1, "10.0.3.179", "",
       "(raylet, ip=10.0.3.179) node_manager.cc:2966: low"},
      {"(RayWorkerWrapper pid=2345, ip=10.0.0.2) boom", -1, -1, 2345, "10.0.0.2", "", "boom"},
      {"(EngineCore pid=630) WARNING x", -1, -1, 630, "", "", "WARNING x"},
      {"(autoscaler +32s) Error: y", -1, -1, -1, "", "", "(autoscaler +32s) Error: y"},
      // Horovod's launcher (Gloo) and Determined's wrapper; MPICH's Hydra.
      {"[2]<stderr>:RuntimeError: no", 2, -1, -1, "", "", "RuntimeError: no"},
      {"[rank=4] Traceback (most recent call last):", 4, -1, -1, "", "",
       "Traceback (most recent call last):"},
      {"[2]<stdin>:x", -1, -1, -1, "", "", "[2]<stdin>:x"},
      {"[mpiexec@master.example.com] HYDU_parse_array (utils/args/args.c:174): no", -1, -1, -1,
       "master.example.com", "", "HYDU_parse_array (utils/args/args.c:174): no"},
      {"[proxy:0:1@node2] HYD_pmcd_pmip_control_cmd_cb: down", -1, -1, -1, "node2", "",
       "HYD_pmcd_pmip_control_cmd_cb: down"},
      // Open MPI's and PMIx's "[host:pid] "; an address is not a host name.
      {"[mpi021:10716] PMIX ERROR: PMIX_ERR_FILE_OPEN_FAILURE", -1, -1, -1, "mpi021", "",
       "PMIX ERROR: PMIX_ERR_FILE_OPEN_FAILURE"},
      {"[gpu-3.cluster:06805] *** Process received signal ***", -1, -1, -1, "gpu-3.cluster", "",
       "*** Process received signal ***"},
      {"[qgpu-813:1    :0:381] Caught signal 7 (Bus error)", -1, -1, -1, "qgpu-813", "",
       "Caught signal 7 (Bus error)"},
      {"[10.0.0.7:29500] x", -1, -1, -1, "", "", "[10.0.0.7:29500] x"},
      {"[node1:abc] x", -1, -1, -1, "", "", "[node1:abc] x"},
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
  CHECK(next_process_prefix("[0]<stdout>:a [1]<stdout>:b", 1) == 14);
  CHECK(shell_prompt_host("ubuntu@ip-10-0-13-120:~$ cat x.err") == "ip-10-0-13-120");
  CHECK(shell_prompt_host("(venv) root@node1:~/kubespray# nvidia-smi") == "node1");
  CHECK(shell_prompt_host("[yfeng1@waterfall mpi4pytest]$ mpirun -np 4 python x.py") ==
        "waterfall");
  CHECK(shell_prompt_host("\\ubuntu@gpu-2:~$ ls") == "gpu-2");
  CHECK(shell_prompt_host("user@example.com: Permission denied (publickey).").empty());
  CHECK(shell_prompt_host("[user@host run] not a prompt").empty());
  CHECK(shell_prompt_host("mail me at a@b:c").empty());
}

TEST_CASE("diagnose: a setup error leads, whatever else the ranks say") {
  Diagnosis d = diagnose_lines({
      "[rank1]: RuntimeError: [../third_party/gloo] Connection closed by peer [10.0.0.2]:4242",
      "[1,2]<stdout>:gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 "
      "and rank 0 both on CUDA device 1000",
  });
  REQUIRE(d.findings.size() >= 2);
  CHECK(d.findings[0].finding.name() == "duplicate-gpu");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.ranks == std::vector<long>{0, 2});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"gpu-03"});
  CHECK(d.findings[0].first_seen == "job.log:2");
  CHECK(d.findings[1].finding.name() == "peer-failed");
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
  CHECK(d.findings[0].finding.name() == "gpu-out-of-memory");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{3});
  CHECK(d.findings[0].finding.message ==
        "rank 3 on node02 failed: CUDA out of memory. Tried to allocate 2.00 GiB and exited with "
        "code 1");
  CHECK(d.launcher == "slurm");
  CHECK(d.verify_with == "srun --nodes 2 --ntasks 4 rankcheck run --timeout 120");
  for (size_t i = 1; i < d.findings.size(); ++i)
    CHECK_FALSE(d.findings[i].initiating);
}

TEST_CASE("diagnose: the verify command counts the ranks the findings name and runs as given") {
  // Three ranks under mpirun; rank 2 printed nothing of its own, mpirun names it.
  Diagnosis d = diagnose_lines({
      "[1,0]<stdout>:rank 0 up on vm",
      "[1,1]<stdout>:rank 1 up on vm",
      "mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.launcher == "mpirun");
  // mpirun passes no MASTER_ADDR or MASTER_PORT: the command gives them (-x).
  CHECK(d.verify_with ==
        "mpirun -np 3 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 rankcheck run --timeout 120");
  // On two hosts: each host's share, and rank 0's host as MASTER_ADDR.
  d = diagnose_lines({
      "[1,0]<stdout>:gpu-01:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
      "[1,3]<stdout>:gpu-02:200:200 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
      "mpirun noticed that process rank 3 with PID 200 on node gpu-02 exited on signal 9 "
      "(Killed).",
  });
  CHECK(d.verify_with ==
        "mpirun -np 4 --host gpu-01:2,gpu-02:2 -x MASTER_ADDR=gpu-01 -x MASTER_PORT=29500 "
        "rankcheck run --timeout 120");
}

TEST_CASE("diagnose: a time limit ends the job; what follows is downstream") {
  Diagnosis d = diagnose_lines({
      "slurmstepd: error: *** STEP 4821.0 ON node01 CANCELLED AT 2024-05-07T15:51:09 DUE TO TIME "
      "LIMIT ***",
      "srun: error: node01: tasks 0-3: Killed",
  });
  REQUIRE(d.findings.size() == 2);
  CHECK(d.findings[0].finding.name() == "job-cancelled");
  CHECK(d.findings[0].finding.message ==
        "the scheduler cancelled 4821.0 on node01 at 2024-05-07T15:51:09 DUE TO TIME LIMIT");
  CHECK(d.findings[1].finding.name() == "process-died");
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
  CHECK(d.findings[0].finding.name() == "collective-desync");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2});
  CHECK(d.exit_code() == exit_code::kGpu);
}

TEST_CASE("diagnose: a lost peer with no error of its own anywhere is peer-failed") {
  Diagnosis d = diagnose_lines({
      "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
      "closed by peer [10.0.0.2]:38580",
  });
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].finding.name() == "peer-failed");
  CHECK(d.findings[0].initiating);
}

TEST_CASE("diagnose: NCCL's remote error with no peer's error anywhere names the network") {
  // ncclRemoteError says itself "a network error or a remote process exiting": with no
  // peer's own error in the logs, the network is what is left to name.
  Diagnosis d = diagnose_lines({
      "[rank0]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was "
      "a network error, NCCL version 2.21.5",
  });
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].finding.name() == "nccl-network-error");
  CHECK(d.findings[0].initiating);
  // With a peer's own error before it, the same line is that failure's lost peer.
  Diagnosis e = diagnose_lines({
      "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
      "[rank0]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was "
      "a network error, NCCL version 2.21.5",
  });
  REQUIRE(e.findings.size() >= 2);
  CHECK(e.findings[0].finding.name() == "gpu-out-of-memory");
  bool lost = false;
  for (const auto& f : e.findings)
    lost = lost || (f.finding.name() == "peer-failed" && !f.initiating);
  CHECK(lost);
}

TEST_CASE("diagnose: torchrun's closing signal marks the survivors, not the culprit") {
  Diagnosis d = diagnose_lines({
      "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 101 closing signal "
      "SIGTERM",
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 "
      "(pid: "
      "102) of binary: /usr/bin/python3",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "process-died");
  CHECK(d.findings[0].initiating);
  CHECK(d.findings[0].finding.message.find("local rank 1 was killed by signal 9 (SIGKILL)") == 0);
}

TEST_CASE("diagnose: ranks that waited name the ones that never came") {
  Diagnosis d = diagnose_lines({
      "0: RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
      "for "
      "key: store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)",
      "1: RuntimeError: Timed out initializing process group in store based barrier on rank: 1, "
      "for "
      "key: store_based_barrier_key:1 (world_size=4, worker_count=2, timeout=0:30:00)",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "missing-rank");
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
  CHECK(d.findings[0].finding.name() == "world-size-mismatch");
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

TEST_CASE("diagnose: time stamps as microseconds into their year") {
  constexpr int64_t kSecond = 1000000;
  CHECK(time_key("E1130 11:02:10.123456") ==
        ((((10 * 31 + 29) * 24 + 11) * 60 + 2) * 60 + 10) * kSecond + 123456);
  CHECK(time_key("2024-11-30 11:02:10") == time_key("I1130 11:02:10"));
  CHECK(time_key("2024-11-30T11:02:10.5Z") == time_key("W1130 11:02:10.500000"));
  CHECK(time_key("2024-11-30 11:02:10,293") == time_key("2024-11-30_11:02:10") + 293000);
  CHECK(time_key("2024-12-01 00:00:00") > time_key("2024-11-30 23:59:59.999999"));
  for (const char* bad : {"", "E ProcessGroupNCCL.cpp:737", "2024-13-01 00:00:00", "E1130 25:00:00",
                          "11:02:10", "2024-11-30"}) {
    INFO(bad);
    CHECK(time_key(bad) == -1);
  }
}

TEST_CASE("diagnose: across files, time stamps decide which failure came first") {
  // rank0.log is read first, but rank 1 failed five seconds earlier. The exceptions
  // have no stamp of their own: they take the last one before them in their file.
  auto run = [](bool stamped) {
    Scanner s;
    s.begin_source("logs/rank0.log");
    s.line(stamped ? "[E1130 11:02:15.000000 77 train.py:3] step 12 failed" : "step 12 failed");
    s.line("RuntimeError: rank 0 ran out of shards");
    s.begin_source("logs/rank1.log");
    s.line(stamped ? "[2024-11-30 11:02:10] rank 1 loading" : "rank 1 loading");
    s.line("ValueError: rank 1 read a corrupt shard");
    return s.finish();
  };
  Diagnosis by_time = run(true);
  REQUIRE(by_time.findings.size() == 2);
  CHECK(by_time.findings[0].finding.ranks == std::vector<long>{1});
  CHECK(by_time.findings[0].first_seen == "logs/rank1.log:2");
  CHECK(by_time.findings[1].finding.ranks == std::vector<long>{0});
  Diagnosis by_name = run(false);  // no stamps: the order they were read in
  REQUIRE(by_name.findings.size() == 2);
  CHECK(by_name.findings[0].finding.ranks == std::vector<long>{0});
}

TEST_CASE("diagnose: a setup error's first sighting is the earliest across files") {
  Scanner s;
  s.begin_source("a/gpu-02.log");
  s.line(
      "[2025-03-01 12:00:09] gpu-02:12:13 [0] init.cc:1 NCCL WARN Bootstrap : no socket interface "
      "found");
  s.begin_source("b/gpu-01.log");
  s.line(
      "[2025-03-01 12:00:02] gpu-01:12:13 [0] init.cc:1 NCCL WARN Bootstrap : no socket interface "
      "found");
  Diagnosis d = s.finish();
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].first_seen == "b/gpu-01.log:1 (2025-03-01 12:00:02)");
  CHECK(d.findings[0].evidence.front().file == "b/gpu-01.log");
}

TEST_CASE("diagnose: srun cancelling the step after a task failed is downstream of it") {
  Diagnosis d = diagnose_lines({
      "srun: error: node02: task 2: Exited with exit code 3",
      "srun: launch/slurm: _step_signal: Terminating StepId=7.0",
      "slurmstepd-node02: error: *** STEP 7.0 ON node02 CANCELLED AT 2026-11-30T16:43:52 ***",
      "srun: error: node01: tasks 0-1: Terminated",
  });
  REQUIRE(d.findings.size() == 3);
  CHECK(d.findings[0].finding.name() == "process-died");
  CHECK(d.findings[0].finding.ranks == std::vector<long>{2});
  CHECK(d.findings[0].finding.hosts == std::vector<std::string>{"node02"});
  CHECK(d.findings[1].finding.name() == "job-cancelled");
  CHECK_FALSE(d.findings[1].initiating);
  CHECK(d.findings[2].finding.ranks == std::vector<long>{0, 1});
  CHECK_FALSE(d.findings[2].initiating);
  // A cancel with nothing before it is someone's scancel: it initiates.
  Diagnosis alone =
      diagnose_lines({"slurmstepd: error: *** JOB 7 ON node02 CANCELLED AT 2026-11-30T16:43:52 ***",
                      "srun: error: node01: tasks 0-1: Terminated"});
  REQUIRE(!alone.findings.empty());
  CHECK(alone.findings[0].finding.name() == "job-cancelled");
  CHECK(alone.findings[0].initiating);
}

TEST_CASE("diagnose: long evidence lines are cut in the text, whole in the JSON") {
  std::string json =
      "{\"message\": {\"message\": \"ValueError: bad shard index 7\", \"extraInfo\": "
      "{\"py_callstack\": \"Traceback (most recent call last):" +
      std::string(400, 'x') + "\"}}}";
  Diagnosis d = diagnose_lines({json}, "run/attempt_0/1/error.json");
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].evidence.front().text == json);
  std::string text = render_text(d, false);
  std::string line = text.substr(text.find("error.json:1  "));
  line = line.substr(0, line.find('\n'));
  CHECK(line.find("…") != std::string::npos);
  size_t row = text.rfind('\n', text.find("error.json:1  ")) + 1;
  CHECK(display_width(text.substr(row, text.find('\n', row) - row)) <= 160);
  CHECK(render_json(d).find(std::string(400, 'x')) != std::string::npos);
}

TEST_CASE("diagnose: escape sequences in the logs never reach the terminal") {
  Diagnosis d = diagnose_lines({
      "srun: error: node\x1b]0;x\x07: task 1: Exited with exit code 1",
      "1: ValueError: \x1b[2Jcleared \x1b]0;owned\x07",
      "[2025-03-01\x1b[2J 12:00:00] gpu-01:1:2 [0] init.cc:1 NCCL WARN Bootstrap : no socket "
      "interface found",
  });
  REQUIRE(!d.findings.empty());
  std::string text = render_text(d, false) + render_json(d);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  // A terminal's sequences are read as the screen showed the line: gone, not obeyed.
  CHECK(text.find("ValueError: cleared") != std::string::npos);
  // In colour, the only escapes are the renderer's own SGR codes ("\x1b[1;31m").
  std::string color = render_text(d, true);
  for (size_t e = color.find('\x1b'); e != std::string::npos; e = color.find('\x1b', e + 1)) {
    size_t m = color.find_first_not_of("0123456789;", e + 2);
    CHECK(color.compare(e, 2, "\x1b[") == 0);
    CHECK((m != std::string::npos && color[m] == 'm'));
  }
  CHECK(color.find('\x07') == std::string::npos);
  for (const DiagFinding& f : d.findings) {
    for (const std::string& h : f.finding.hosts)
      CHECK(h.find('\x1b') == std::string::npos);
    CHECK(f.finding.message.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("diagnose: hostile lines cost time in proportion to their length, and no memory") {
  using Clock = std::chrono::steady_clock;
  const std::vector<std::string> lines = {
      std::string(100000, '['),
      "[default0]:" + std::string(100000, '['),
      [] {
        std::string l;
        while (l.size() < 64 * 1024)
          l += "[1,2]<";
        return l + " Duplicate GPU detected";
      }(),
      [] {
        std::string l;
        while (l.size() < 64 * 1024)
          l += "[default1]:Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a ";
        return l;
      }(),
      "rankcheck: FAIL: " + std::string(64 * 1024, 'a'),
      "[E1130 11:02:10" + std::string(64 * 1024, '0'),
  };
  for (const std::string& line : lines) {
    INFO(line.substr(0, 40));
    auto start = Clock::now();
    Scanner s;
    s.begin_source("hostile.log");
    for (int i = 0; i < 16; ++i)
      s.line(line);
    Diagnosis d = s.finish();
    CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 2.0);
    for (const DiagFinding& f : d.findings) {
      CHECK(f.evidence.size() <= 3);
      for (const Evidence& e : f.evidence)
        CHECK(e.text.size() <= 2048 + 3);
    }
  }
}

TEST_CASE("diagnose: a file of one 4 MiB line without a line break is read in bounded pieces") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("rankcheck-diag-" + std::to_string(::getpid()));
  fs::create_directories(dir / "attempt_0" / "1");
  {
    std::ofstream f(dir / "attempt_0" / "1" / "stderr.log", std::ios::binary);
    f << "ValueError: first " << std::string(4 << 20, 'y');
  }
  Scanner s;
  CHECK(read_inputs({{dir.string()}}, s) == "");
  Diagnosis d = s.finish();
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].finding.message.rfind("local rank 1 failed: ValueError: first yyy", 0) == 0);
  CHECK(d.findings[0].evidence.front().text.size() <= 2048 + 3);
  CHECK(d.lines == 1);
  // Input that cannot be read names its path.
  Scanner t;
  std::string missing = (dir / "no-such.log").string();
  CHECK(read_inputs({{dir.string(), missing}}, t) == missing + ": No such file or directory");
  fs::remove_all(dir);
}

TEST_CASE("diagnose: a file read ahead on a second thread reads as the same bytes on stdin") {
  // A few MiB, so that lines cross the chunks: prefixes, CRLF, colour codes, a line
  // longer than the longest kept whole, and failures near the chunks' edges.
  namespace fs = std::filesystem;
  fs::path file = fs::temp_directory_path() / ("rankcheck-ahead-" + std::to_string(::getpid()));
  {
    std::ofstream f(file, std::ios::binary);
    for (int i = 0; i < 40000; ++i) {
      f << "node" << i % 8 << ":" << 1000 + i % 8 << ":" << 2000 + i % 8 << " [" << i % 8
        << "] NCCL INFO Channel " << i % 32 << "/0 : " << i % 8 << "[" << i % 8 << "] -> "
        << (i + 1) % 8 << "[" << (i + 1) % 8 << "] via P2P/IPC\n";
      if (i % 997 == 0) f << "[rank" << i % 8 << "]: step " << i << " loss 0.5\r\n";
      if (i % 1499 == 0)
        f << "\x1b[31m[rank3]: torch.OutOfMemoryError: CUDA out of memory.\x1b[0m\n";
      if (i == 20000) f << "[rank5]: " << std::string(100 * 1024, 'z') << " ValueError: long\n";
      if (i % 3001 == 0)
        f << "[rank1]: torch.distributed.DistNetworkError: The client socket has timed out after "
             "1800s while trying to connect to (10.0.0.1, 29500).\n";
    }
    f << "srun: error: node3: task 3: Exited with exit code 1";  // no line break at the end
  }
  Scanner ahead;
  REQUIRE(read_inputs({{file.string()}}, ahead) == "");
  Diagnosis a = ahead.finish();
  int saved = ::dup(0);
  int fd = ::open(file.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::dup2(fd, 0);
  Scanner serial;
  std::string r = read_inputs({{"-"}}, serial);
  ::dup2(saved, 0);
  ::close(saved);
  ::close(fd);
  REQUIRE(r == "");
  Diagnosis b = serial.finish();
  std::string ja = render_json(a), jb = render_json(b);
  for (size_t at; (at = ja.find(file.string())) != std::string::npos;)
    ja.replace(at, file.string().size(), "-");
  CHECK(a.lines == b.lines);
  CHECK(a.bytes == b.bytes);
  CHECK(ja == jb);
  REQUIRE(!a.findings.empty());
  // A file shorter than a short string's inline buffer: its lines still read whole.
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << "OOMKilled\n";
  }
  Scanner tiny;
  REQUIRE(read_inputs({{file.string()}}, tiny) == "");
  Diagnosis t = tiny.finish();
  REQUIRE(!t.findings.empty());
  CHECK(t.findings[0].finding.name() == "host-out-of-memory");
  fs::remove(file);
}

TEST_CASE("diagnose: long lines are kept whole only up to a budget") {
  // 20000 ranks each print a 2 KiB error: 40 MiB of text. The first 32 MiB of
  // long lines are kept whole; what comes after is cut to 300 bytes.
  Scanner s;
  s.begin_source("wide.log");
  std::string tail(2000, 'x');
  s.line("[rank0]: " + std::string("[E1130 11:02:10.0 1 a.cpp:1] ") +
         "NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1a " + tail);
  for (int r = 2; r < 20000; ++r)
    s.line("[rank" + std::to_string(r) + "]: RuntimeError: Connection reset by peer " + tail);
  s.line("[rank1]: NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a " +
         tail);
  Diagnosis d = s.finish();
  REQUIRE(!d.findings.empty());
  REQUIRE(d.findings[0].finding.name() == "duplicate-gpu");
  REQUIRE(d.findings[0].evidence.size() == 2);
  CHECK(d.findings[0].evidence[0].text.size() > 2000);  // whole, before the budget ran out
  CHECK(d.findings[0].evidence[1].text.size() <= 303);  // cut, after
}

TEST_CASE("diagnose: more joiners than the world size is not a missing rank") {
  Diagnosis d = diagnose_lines({
      "[I socket.cpp:494] [c10d] The server socket has started to listen on [::]:29500.",
      "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 5/4 "
      "clients joined.",
  });
  REQUIRE(!d.findings.empty());
  CHECK(d.findings[0].finding.name() == "world-size-mismatch");
}
