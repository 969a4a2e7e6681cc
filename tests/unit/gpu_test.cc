// The GPU rules (decided before NCCL), the stage rules (after it), and the GPU
// parts of the wire format. No GPU involved: records and results are built here.

#include <random>

#include <catch2/catch.hpp>

#include "base/text.h"
#include "helpers.h"
#include "protocol/messages.h"
#include "report/report.h"
#include "rules/rules.h"

using namespace rankcheck;
using test::find;
using test::sole;
using test::tracker_clean;
using Ranks = std::vector<long>;
using Hosts = std::vector<std::string>;

namespace {

std::string uuid(int host, int dev) {
  return fmt::format("GPU-{:02d}{:02d}0000-0000-0000-0000-000000000000", host, dev);
}

// A healthy GPU job: `per_host` ranks per host, each on its own GPU.
JobView gpu_job(int world, int per_host) {
  JobView v = test::healthy_job(world, per_host);
  v.gpu_stage = true;
  for (Member& m : v.members) {
    Record& r = m.record;
    GpuFacts& g = r.gpu;
    g.state = GpuState::kUsable;
    g.cuda_version = 13000;
    g.driver = "580.65.06";
    g.device_count = per_host;
    g.nccl_version = 22809;
    g.nccl_path = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
    g.choice = "LOCAL_RANK";
    g.devices = {GpuDevice{r.rank, r.local_rank, uuid(r.rank / per_host, r.local_rank),
                           fmt::format("00000000:{:02X}:00.0", 0x18 + r.local_rank),
                           "NVIDIA H100 80GB HBM3", 80ull << 30}};
  }
  return v;
}

// The one finding of `v`: ranks 2 and 3 use one GPU.
Finding ranks_2_3_share_a_gpu(const JobView& v) {
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "duplicate-gpu");
  CHECK(f.exit_code == 3);
  CHECK(f.ranks == Ranks{2, 3});
  return f;
}

}  // namespace

TEST_CASE("gpu rules: a healthy GPU job has no findings, and the tracker agrees") {
  JobView v = gpu_job(16, 8);
  CHECK(test::checks(v).empty());
  CHECK(tracker_clean(v));
  CHECK(!gpu_stage_blocker(v.members));
}

TEST_CASE("duplicate-gpu: two ranks on one host, one UUID, and how they got there") {
  JobView v = gpu_job(4, 4);
  v.members[3].record.gpu.devices[0] = v.members[2].record.gpu.devices[0];
  v.members[3].record.gpu.devices[0].rank = 3;
  v.members[2].record.gpu.visible_devices = "2";
  v.members[3].record.gpu.visible_devices = "2";
  Finding f = ranks_2_3_share_a_gpu(v);
  CHECK(f.message ==
        "ranks 2-3 on gpu-01 use the same GPU GPU-00020000-0000-0000-0000-000000000000: rank 2 "
        "(LOCAL_RANK=2, CUDA_VISIBLE_DEVICES=2, device 2); rank 3 (LOCAL_RANK=3, "
        "CUDA_VISIBLE_DEVICES=2, device 2)");
  // The same UUID on two hosts is two machines (or simulated ones), not one GPU twice.
  JobView w = gpu_job(2, 1);
  w.members[1].record.gpu.devices[0].uuid = w.members[0].record.gpu.devices[0].uuid;
  CHECK(test::checks(w).empty());
}

TEST_CASE("duplicate-gpu: MIG slices of one GPU share its bus id, under UUIDs of their own") {
  // NCCL refuses them ("Duplicate GPU detected"; 2.30: "Multiple Ranks are using the
  // same GPU/Partition"): the UUIDs differ, the PCI bus id does not.
  JobView v = gpu_job(4, 4);
  for (int k = 2; k < 4; ++k) {
    GpuDevice& d = v.members[size_t(k)].record.gpu.devices[0];
    d.pci_bus_id = "00000000:1A:00.0";
    d.uuid = fmt::format("MIG-{}1111111-2222-3333-4444-555555555555", k);
  }
  Finding f = ranks_2_3_share_a_gpu(v);
  CHECK(f.message ==
        "ranks 2-3 on gpu-01 use the same GPU 00000000:1A:00.0 through different MIG slices "
        "(MIG-21111111-2222-3333-4444-555555555555 and MIG-31111111-2222-3333-4444-555555555555): "
        "rank 2 (LOCAL_RANK=2, CUDA_VISIBLE_DEVICES unset, device 2); rank 3 (LOCAL_RANK=3, "
        "CUDA_VISIBLE_DEVICES unset, device 3)");
  CHECK(f.fix ==
        "NCCL refuses two ranks on one GPU at init, and MIG slices of one GPU are one GPU to it: "
        "give each rank a slice of a different GPU, or a whole GPU");
  // The tracker agrees: not clean.
  CHECK(!tracker_clean(v));
}

TEST_CASE("nccl-version-mismatch groups hosts by the NCCL they load") {
  JobView v = gpu_job(16, 8);
  for (Member& m : v.members) {
    if (m.record.host == "gpu-02") {
      m.record.gpu.nccl_version = 22105;
      m.record.gpu.nccl_path = "/opt/nccl/lib/libnccl.so.2";
    }
  }
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "nccl-version-mismatch");
  CHECK(f.exit_code == 3);
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message ==
        "hosts load different NCCL versions: ranks 0-7 on gpu-01 loads NCCL 2.28.9 "
        "(/usr/lib/x86_64-linux-gnu/libnccl.so.2) but ranks 8-15 on gpu-02 loads NCCL 2.21.5 "
        "(/opt/nccl/lib/libnccl.so.2)");
}

TEST_CASE("a host without a driver, a rank without a GPU, a node short of GPUs") {
  JobView v = gpu_job(16, 8);
  for (Member& m : v.members) {
    if (m.record.host == "gpu-02") {
      m.record.gpu = GpuFacts{};
      m.record.gpu.state = GpuState::kNoDriver;
      m.record.gpu.error =
          "libcuda.so.1: cannot open shared object file: No such file or directory";
    }
  }
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "cuda-driver-missing");
  CHECK(f.exit_code == 5);
  CHECK(f.message ==
        "no CUDA driver for ranks 8-15 on gpu-02, while the other ranks have GPUs: libcuda.so.1: "
        "cannot open shared object file: No such file or directory");

  JobView w = gpu_job(4, 4);
  w.members[1].record.gpu.state = GpuState::kNoDevice;
  w.members[1].record.gpu.error = "no GPU visible (CUDA_VISIBLE_DEVICES=)";
  w.members[1].record.gpu.devices.clear();
  f = sole(test::checks(w));
  CHECK(f.name() == "gpu-missing");
  CHECK(f.ranks == Ranks{1});

  JobView n = gpu_job(8, 4);
  n.members.resize(2);  // node mode: two members of 4 ranks each
  for (int k = 0; k < 2; ++k) {
    Record& r = n.members[size_t(k)].record;
    r.rank = k * 4;
    r.nranks = 4;
    r.world_size = 8;
    r.local_rank = 0;
    r.host = fmt::format("node{}", k);
  }
  n.members[1].record.gpu.state = GpuState::kNoDevice;
  n.members[1].record.gpu.error =
      "3 GPUs visible (CUDA_VISIBLE_DEVICES unset), but this node "
      "stands for 4 ranks";
  n.members[1].record.gpu.devices.clear();
  for (long k = 0; k < 4; ++k) {
    n.members[0].record.gpu.devices.resize(4, n.members[0].record.gpu.devices[0]);
    n.members[0].record.gpu.devices[size_t(k)].rank = int32_t(k);
    n.members[0].record.gpu.devices[size_t(k)].uuid = uuid(0, int(k));
    n.members[0].record.gpu.devices[size_t(k)].pci_bus_id =
        fmt::format("00000000:{:02X}:00.0", 0x18 + k);
  }
  f = sole(test::checks(n));
  CHECK(f.name() == "gpu-count-mismatch");
  CHECK(f.ranks == Ranks{4, 5, 6, 7});
}

TEST_CASE("gpu_grant: the GPUs a launcher or container gave, in the order they narrow") {
  auto grant = [](EnvMap env) { return gpu_grant(env); };
  CHECK(grant({}).count == -1);
  GpuGrant g = grant({{"CUDA_VISIBLE_DEVICES", "0,1, 2 ,3"}, {"SLURM_GPUS_ON_NODE", "8"}});
  CHECK(g.count == 4);
  CHECK(g.by == "CUDA_VISIBLE_DEVICES lists 4 (0,1, 2 ,3)");
  // The driver stops at the first entry that names nothing: so does the count.
  CHECK(grant({{"CUDA_VISIBLE_DEVICES", "0,1,-1,3"}}).count == 2);
  CHECK(grant({{"CUDA_VISIBLE_DEVICES", ""}}).count == 0);
  CHECK(grant({{"CUDA_VISIBLE_DEVICES", "GPU-8f3c,MIG-1a2b"}}).count == 2);
  CHECK(grant({{"CUDA_VISIBLE_DEVICES", "0,1,0"}}).count == -1);  // what shows is not documented
  // The container's list, where CUDA_VISIBLE_DEVICES is unset.
  g = grant({{"NVIDIA_VISIBLE_DEVICES", "GPU-aa,GPU-bb,GPU-cc"}, {"SLURM_GPUS_ON_NODE", "8"}});
  CHECK(g.count == 3);
  CHECK(g.by == "NVIDIA_VISIBLE_DEVICES lists 3 (GPU-aa,GPU-bb,GPU-cc)");
  for (const char* none : {"all", "none", "void", "", "/var/run/nvidia-container-devices"}) {
    INFO(none);
    CHECK(grant({{"NVIDIA_VISIBLE_DEVICES", none}}).count == -1);
  }
  // Slurm's count of the GPUs allocated to the step on this node.
  g = grant({{"SLURM_GPUS_ON_NODE", "8"}});
  CHECK(g.count == 8);
  CHECK(g.by == "SLURM_GPUS_ON_NODE=8");
  for (const char* bad : {"", "0", "8x", "-1", " 8"}) {
    INFO(bad);
    CHECK(grant({{"SLURM_GPUS_ON_NODE", bad}}).count == -1);
  }
}

TEST_CASE("gpu-lost: a host shows fewer GPUs than it was given, each rank still has one") {
  JobView v = gpu_job(8, 2);
  for (Member& m : v.members) {
    GpuFacts& g = m.record.gpu;
    g.device_count = 4;
    g.granted = 4;
    g.granted_by = "CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3)";
  }
  CHECK(test::checks(v).empty());
  CHECK(tracker_clean(v));
  for (Member& m : v.members) {
    if (m.record.host == "gpu-02") m.record.gpu.device_count = 3;
  }
  auto fs = test::checks(v);
  Finding f = sole(fs);
  CHECK(f.name() == "gpu-lost");
  CHECK(f.severity == Severity::kWarning);
  CHECK(exit_code_for(fs) == 0);
  CHECK(f.ranks == Ranks{2, 3});
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message ==
        "gpu-02 shows 3 GPUs, but CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3): a GPU given to ranks "
        "2-3 is not there; the check ran on the GPUs shown");
  CHECK(f.fix.starts_with("look at the host's GPUs"));
  CHECK(!tracker_clean(v));
  // More shown than given: nothing lost.
  for (Member& m : v.members)
    m.record.gpu.device_count = 8;
  CHECK(test::checks(v).empty());
}

TEST_CASE("gpu-count-mismatch: the grant is the evidence where no other host shows enough") {
  // One host, 4 ranks, 3 GPUs shown: rank 3 wraps onto rank 0's GPU. Without a
  // grant that is the job's request (duplicate-gpu); with CUDA_VISIBLE_DEVICES
  // listing 4 it is a GPU the host lost.
  JobView v = gpu_job(4, 4);
  for (Member& m : v.members)
    m.record.gpu.device_count = 3;
  v.members[3].record.gpu.devices[0] = v.members[0].record.gpu.devices[0];
  v.members[3].record.gpu.devices[0].rank = 3;
  CHECK(sole(test::checks(v)).name() == "duplicate-gpu");
  for (Member& m : v.members) {
    m.record.gpu.granted = 4;
    m.record.gpu.granted_by = "CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3)";
  }
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "gpu-count-mismatch");
  CHECK(f.ranks == Ranks{0, 3});
  CHECK(f.message ==
        "gpu-01 shows 3 GPUs, the job placed 4 ranks there, so ranks 0,3 share a GPU; "
        "CUDA_VISIBLE_DEVICES lists 4 (0,1,2,3): a GPU of gpu-01 is missing");
}

TEST_CASE("nccl-missing and cuda-driver-mismatch") {
  JobView v = gpu_job(4, 2);
  v.members[3].record.gpu.nccl_version = 0;
  v.members[3].record.gpu.nccl_error = "libnccl.so.2: cannot open shared object file";
  Finding f = sole(test::checks(v));
  CHECK(f.name() == "nccl-missing");
  CHECK(f.message ==
        "NCCL not found for rank 3 on gpu-02: libnccl.so.2: cannot open shared object file");

  JobView d = gpu_job(4, 2);
  d.members[2].record.gpu.driver = "550.54.15";
  d.members[3].record.gpu.driver = "550.54.15";
  f = sole(test::checks(d));
  CHECK(f.name() == "cuda-driver-mismatch");
  CHECK(f.severity == Severity::kWarning);
}

TEST_CASE("local-rank-wrapped: one GPU a task, LOCAL_RANK past it, each on its own GPU") {
  // Slurm's --gpus-per-task=1: each task sees its own GPU as device 0, LOCAL_RANK
  // counts 0-3; the stage took device LOCAL_RANK % 1 = 0 (four different GPUs).
  JobView v = gpu_job(8, 4);
  for (Member& m : v.members) {
    Record& r = m.record;
    r.gpu.device_count = 1;
    r.gpu.visible_devices = std::to_string(r.local_rank);
    r.gpu.choice = fmt::format("LOCAL_RANK {} % 1 visible = device 0", r.local_rank);
    r.gpu.devices[0].ordinal = 0;
  }
  auto fs = test::checks(v);
  Finding f = sole(fs);
  CHECK(f.name() == "local-rank-wrapped");
  CHECK(f.severity == Severity::kWarning);
  CHECK(exit_code_for(fs) == 0);
  CHECK(f.ranks == Ranks{1, 2, 3, 5, 6, 7});
  CHECK(f.hosts == Hosts{"gpu-01", "gpu-02"});
  CHECK(f.message ==
        "ranks 1-3,5-7 on gpu-01 and gpu-02 have LOCAL_RANK 1-3 but each see 1 GPU (rank 1: "
        "CUDA_VISIBLE_DEVICES=1): rankcheck used device LOCAL_RANK % 1; a script that calls "
        "torch.cuda.set_device(LOCAL_RANK) fails there with 'invalid device ordinal'");
  CHECK(f.fix.starts_with("pick the device among those the process sees"));
  CHECK(!tracker_clean(v));

  // --device named the device: nothing to say.
  JobView d = v;
  for (Member& m : d.members)
    m.record.gpu.choice = "--device 0 of 1 visible";
  CHECK(test::checks(d).empty());
  CHECK(tracker_clean(d));
  // Two ranks on one GPU that way: duplicate-gpu alone.
  JobView s = v;
  s.members[1].record.gpu.devices[0] = s.members[0].record.gpu.devices[0];
  s.members[1].record.gpu.devices[0].rank = 1;
  auto ids = test::checks(s);
  REQUIRE(ids.size() == 2);
  CHECK(ids[0].name() == "duplicate-gpu");
  CHECK(ids[1].name() == "local-rank-wrapped");
  CHECK(ids[1].ranks == Ranks{2, 3, 5, 6, 7});
}

TEST_CASE("gpu-unavailable: nobody has a GPU, said once, as a warning") {
  JobView v = test::healthy_job(4, 4);
  v.gpu_stage = true;
  for (Member& m : v.members) {
    m.record.gpu.state = GpuState::kNoDriver;
    m.record.gpu.error = "libcuda.so.1: cannot open shared object file: No such file or directory";
  }
  auto fs = test::checks(v);
  Finding f = sole(fs);
  CHECK(f.name() == "gpu-unavailable");
  CHECK(f.message ==
        "no member has a usable GPU, so the NCCL stage did not run; ranks 0-3 on gpu-01: no "
        "CUDA driver (libcuda.so.1: cannot open shared object file: No such file or directory)");
  CHECK(f.severity == Severity::kWarning);
  // The ranks and hosts the message names, in the JSON too (newcomer bug 7).
  CHECK(f.ranks == std::vector<long>{0, 1, 2, 3});
  CHECK(f.hosts == std::vector<std::string>{"gpu-01"});
  CHECK(exit_code_for(fs) == 0);
  CHECK(*gpu_stage_blocker(v.members) == "no member has a usable GPU");
  v.gpu_stage = false;  // --no-gpu on the master: the GPUs are not looked at
  CHECK(test::checks(v).empty());
}

namespace {
RankResult good(int rank, int world) {
  RankResult r;
  r.rank = rank;
  r.init_ok = true;
  r.init_ms = 12;
  r.allreduce_ok = r.allreduce_done = true;
  r.expected = r.got = int64_t(world) * (world + 1) / 2;
  r.allreduce_us = 40;
  return r;
}

// The GPU stage of the first `world` members of `v`, each of whom reported good results.
StageView all_good(const JobView& v, int world) {
  StageView sv;
  sv.world_size = world;
  sv.members = &v.members;
  for (int k = 0; k < world; ++k)
    sv.results.push_back(good(k, world));
  return sv;
}
}  // namespace

TEST_CASE("stage rules: init failed, init stuck, silent ranks") {
  JobView v = gpu_job(4, 2);
  StageView sv = all_good(v, 4);
  sv.stage_ms = 12000;
  CHECK(stage_checks(sv).empty());

  sv.results[1].init_ok = false;
  sv.results[1].init_error = "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  Finding f = sole(stage_checks(sv));
  CHECK(f.name() == "nccl-init-failed");
  CHECK(f.message ==
        "NCCL init failed for rank 1 on gpu-01: unhandled system error (run with "
        "NCCL_DEBUG=INFO for details)");

  sv.results[1] = good(1, 4);
  sv.results[2].init_ok = false;
  sv.results[2].init_timed_out = true;
  sv.results.pop_back();  // rank 3 never reported
  f = sole(stage_checks(sv));
  CHECK(f.name() == "nccl-init-timeout");
  CHECK(f.ranks == Ranks{2, 3});
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message ==
        "NCCL init did not finish within 12 s for ranks 2-3 on gpu-02 (rank 3 sent no result: "
        "the process died or lost its connection); ranks 0-1 finished");
}

TEST_CASE("stage rules: a rank still connected without a result is stuck, not dead") {
  JobView v = gpu_job(4, 2);
  StageView sv = all_good(v, 4);
  sv.stage_ms = 12000;
  sv.results.erase(sv.results.begin() + 2);  // rank 2: connected to the end, no result
  sv.pending = {2};
  Finding f = sole(stage_checks(sv));
  CHECK(f.name() == "nccl-init-timeout");
  CHECK(f.ranks == Ranks{2});
  CHECK(f.hosts == Hosts{"gpu-02"});
  CHECK(f.message ==
        "rank 2 on gpu-02 sent no result within 12 s, though still connected: stuck in NCCL "
        "(init, the all-reduce or its abort); ranks 0-1,3 finished");

  // With a rank whose init timed out and one that is gone: each said as it is.
  sv.results.pop_back();  // rank 3 lost its connection
  sv.results[1].init_ok = false;
  sv.results[1].init_timed_out = true;
  f = sole(stage_checks(sv));
  CHECK(f.ranks == Ranks{1, 2, 3});
  CHECK(f.message ==
        "NCCL init did not finish within 12 s for ranks 1,3 on gpu-01 and gpu-02 (rank 3 sent "
        "no result: the process died or lost its connection); rank 2 on gpu-02 sent no result "
        "within 12 s, though still connected: stuck in NCCL (init, the all-reduce or its "
        "abort); rank 0 finished");

  // No rank finished, none failed, NCCL said nothing: NCCL's init waits for all of
  // them, so one stuck rank holds every host; none is suspected (a drain would take
  // them all). Where each was stays in the message.
  for (RankResult& r : sv.results) {
    r.init_ok = false;
    r.init_timed_out = true;
  }
  f = sole(stage_checks(sv));
  CHECK(f.name() == "nccl-init-timeout");
  CHECK(f.hosts.empty());
  CHECK(suspect_hosts({f}).empty());
  CHECK(f.message.find("on gpu-01 and gpu-02") != std::string::npos);
  CHECK(f.message.find("no rank finished init") != std::string::npos);
}

TEST_CASE("stage rules: wrong total, failure, timeout, low bandwidth") {
  JobView v = gpu_job(4, 2);
  StageView sv = all_good(v, 4);
  sv.results[0].got = 11;
  sv.results[1].allreduce_done = sv.results[1].allreduce_ok = false;
  sv.results[1].allreduce_error = "cuStreamQuery: an illegal memory access was encountered";
  sv.results[2].allreduce_done = sv.results[2].allreduce_ok = false;
  sv.results[2].allreduce_timed_out = true;
  sv.results[0].allreduce_ok = false;
  auto fs = stage_checks(sv);
  REQUIRE(fs.size() == 3);
  CHECK(fs[0].name() == "allreduce-wrong-result");
  CHECK(fs[0].message ==
        "the all-reduce of one value per rank gave a wrong total: rank 0 "
        "expected 10, got 11");
  CHECK(fs[1].name() == "allreduce-failed");
  CHECK(fs[1].ranks == Ranks{1});
  CHECK(fs[2].name() == "allreduce-timeout");
  CHECK(fs[2].ranks == Ranks{2});

  StageView bw = all_good(v, 2);
  bw.min_busbw_gbps = 100;
  for (RankResult& r : bw.results) {
    r.bandwidth_bytes = 1 << 28;
    r.busbw_gbps = r.rank == 0 ? 150 : 12.5;
  }
  Finding f = sole(stage_checks(bw));
  CHECK(f.name() == "bandwidth-low");
  CHECK(f.message == "all-reduce bus bandwidth below --min-busbw 100.0 GB/s: rank 1 12.5 GB/s");
}

TEST_CASE("stage rules: one rank has no bus bandwidth, and no floor") {
  // busbw = algbw * 2(n-1)/n is 0 for one rank: --min-busbw cannot apply there.
  JobView v = gpu_job(1, 1);
  StageView sv = all_good(v, 1);
  sv.min_busbw_gbps = 100;
  sv.results[0].bandwidth_bytes = 1 << 28;
  sv.results[0].algbw_gbps = 20;
  sv.results[0].busbw_gbps = 0;
  CHECK(stage_checks(sv).empty());
}

TEST_CASE("stage rules: the timed all-reduce, and a total never written") {
  JobView v = gpu_job(4, 2);
  StageView sv = all_good(v, 4);
  // A failure of the timed all-reduce is a failure, not a wrong total.
  for (int k : {0, 1}) {
    RankResult& r = sv.results[size_t(k)];
    r.allreduce_ok = r.allreduce_done = false;
    r.bandwidth_bytes = 64 << 10;
  }
  sv.results[0].allreduce_error =
      "the timed all-reduce of 64 KiB (--bandwidth): ncclAllReduce: unhandled system error";
  sv.results[1].allreduce_timed_out = true;
  auto fs = stage_checks(sv);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name() == "allreduce-failed");
  CHECK(fs[0].message ==
        "the all-reduce failed: rank 0: the timed all-reduce of 64 KiB (--bandwidth): "
        "ncclAllReduce: unhandled system error");
  CHECK(fs[1].name() == "allreduce-timeout");
  CHECK(fs[1].message ==
        "the timed all-reduce of 64 KiB (--bandwidth) did not complete within the deadline for "
        "rank 1 on gpu-01");

  // A world of one whose receive buffer still holds the sentinel: never written.
  StageView one = all_good(v, 1);
  one.results[0].allreduce_ok = false;
  one.results[0].got = kAllreduceSentinel;
  Finding f = sole(stage_checks(one));
  CHECK(f.name() == "allreduce-wrong-result");
  CHECK(f.message ==
        "the all-reduce of one value per rank gave a wrong total: rank 0 expected 1, got nothing "
        "(buffer never written)");
}

namespace {
const char* kQpText =
    "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1, curr state "
    "INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.1, remote GID "
    "::ffff:10.0.0.2";
}  // namespace

TEST_CASE("stage rules: NCCL's own words are quoted, and what they read as said") {
  JobView v = gpu_job(4, 2);
  StageView sv;
  sv.world_size = 4;
  sv.members = &v.members;
  sv.stage_ms = 12000;
  for (int k = 0; k < 4; ++k)
    sv.results.push_back(good(k, 4));
  RankResult& r3 = sv.results[3];
  r3.init_ok = false;
  r3.init_error = "ncclCommGetAsyncError: unhandled system error";
  r3.nccl_warn = kQpText;
  r3.nccl_finding = "nccl-network-error";
  r3.nccl_net = "IB";
  auto fs = stage_checks(sv);
  REQUIRE(!fs.empty());
  CHECK(fs[0].name() == "nccl-init-failed");
  CHECK(fs[0].exit_code == exit_code::kGpu);
  CHECK(fs[0].message ==
        std::string("NCCL init failed for rank 3 on gpu-02: ncclCommGetAsyncError: "
                    "unhandled system error; NCCL says on gpu-02: ") +
            kQpText + ", which reads as a network error (nccl-network-error)");
  // The fix is the network error's, not "rerun with NCCL_DEBUG=INFO".
  CHECK(fs[0].fix == finding_kind(FindingId::kNcclNetworkError).fix);

  // NCCL's last error is that warning already: not quoted twice.
  r3.init_error = std::string("ncclCommGetAsyncError: unhandled system error (") + kQpText + ")";
  fs = stage_checks(sv);
  CHECK(fs[0].message == "NCCL init failed for rank 3 on gpu-02: " + printable(r3.init_error, 300) +
                             "; NCCL's warning reads as a network error (nccl-network-error)");

  // Words the catalogue reads as the stage's own finding: quoted, the hint without
  // NCCL_DEBUG=INFO.
  r3.init_error = "ncclCommGetAsyncError: internal error";
  r3.nccl_warn = "Error : ring 0 does not loop back to start (1 != 0)";
  r3.nccl_finding = "nccl-init-failed";
  fs = stage_checks(sv);
  CHECK(fs[0].message ==
        "NCCL init failed for rank 3 on gpu-02: ncclCommGetAsyncError: internal "
        "error; NCCL says on gpu-02: Error : ring 0 does not loop back to start "
        "(1 != 0)");
  CHECK(fs[0].fix.find("NCCL_DEBUG") == std::string::npos);
  CHECK(fs[0].fix.find("NCCL's own words above name the cause") == 0);

  // Where NCCL said nothing, the catalogue's hint stands.
  r3.nccl_warn.clear();
  r3.nccl_finding.clear();
  fs = stage_checks(sv);
  CHECK(fs[0].fix == finding_kind(FindingId::kNcclInitFailed).fix);
  CHECK(fs[0].message.find("NCCL says") == std::string::npos);
}

TEST_CASE("stage rules: a stuck init and a failed all-reduce quote NCCL too") {
  JobView v = gpu_job(4, 2);
  StageView sv;
  sv.world_size = 4;
  sv.members = &v.members;
  sv.stage_ms = 12000;
  for (int k = 0; k < 4; ++k) {
    sv.results.push_back(good(k, 4));
    sv.results.back().init_ok = false;
    sv.results.back().init_timed_out = true;
  }
  sv.results[2].nccl_warn = "Cuda failure 2 'out of memory'";
  sv.results[2].nccl_finding = "gpu-out-of-memory";
  sv.results[0].nccl_warn = "socketProgress: Connection closed by remote peer";
  sv.results[0].nccl_finding = "peer-failed";
  auto fs = stage_checks(sv);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "nccl-init-timeout");
  CHECK(fs[0].message ==
        "NCCL init did not finish within 12 s for ranks 0-3 on gpu-01 and gpu-02; no rank finished "
        "init; NCCL says on gpu-02: Cuda failure 2 'out of memory', which reads as the GPU out "
        "of memory (gpu-out-of-memory) (NCCL said other things on gpu-01: see stage_results in "
        "the JSON)");
  CHECK(fs[0].fix == finding_kind(FindingId::kGpuOutOfMemory).fix);

  StageView ar;
  ar.world_size = 2;
  ar.members = &v.members;
  for (int k = 0; k < 2; ++k)
    ar.results.push_back(good(k, 2));
  ar.results[1].allreduce_ok = ar.results[1].allreduce_done = false;
  ar.results[1].allreduce_error = "ncclAllReduce: unhandled cuda error";
  ar.results[1].nccl_warn = "Cuda failure 'an illegal memory access was encountered'";
  ar.results[1].nccl_finding = "cuda-error";
  fs = stage_checks(ar);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "allreduce-failed");
  CHECK(fs[0].message ==
        "the all-reduce failed: rank 1: ncclAllReduce: unhandled cuda error; NCCL says on gpu-01: "
        "Cuda failure 'an illegal memory access was encountered', which reads as a CUDA error "
        "(cuda-error)");
  CHECK(fs[0].fix == finding_kind(FindingId::kCudaError).fix);
}

TEST_CASE("stage rules: hosts whose NCCL chose different networks") {
  JobView v = gpu_job(6, 2);
  StageView sv;
  sv.world_size = 6;
  sv.members = &v.members;
  for (int k = 0; k < 6; ++k) {
    sv.results.push_back(good(k, 6));
    sv.results.back().nccl_net = k >= 4 ? "Socket" : "IB";
  }
  auto fs = stage_checks(sv);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].name() == "nccl-net-mismatch");  // one id for the fact, run and diagnose
  CHECK(fs[0].is_error());                     // IB ranks and Socket ranks never connect
  CHECK(fs[0].exit_code == exit_code::kMismatch);
  CHECK(fs[0].hosts == Hosts{"gpu-03"});
  CHECK(fs[0].ranks == Ranks{4, 5});
  CHECK(fs[0].message ==
        "NCCL chose different networks: IB for ranks 0-3 on gpu-01 and gpu-02 but Socket for "
        "ranks 4-5 on gpu-03");

  // Two networks neither of which is Socket: said, as a warning.
  for (int k = 4; k < 6; ++k)
    sv.results[size_t(k)].nccl_net = "AWS Libfabric";
  fs = stage_checks(sv);
  REQUIRE(fs.size() == 1);
  CHECK(!fs[0].is_error());

  // One network, or none said: nothing.
  for (RankResult& r : sv.results)
    r.nccl_net = r.rank == 0 ? "" : "IB";
  CHECK(stage_checks(sv).empty());
}

TEST_CASE("wire: GPU facts and stage results round-trip") {
  JobView v = gpu_job(2, 2);
  Record r = v.members[1].record;
  r.gpu.granted = 8;
  r.gpu.granted_by = "SLURM_GPUS_ON_NODE=8";
  r.gpu.devices[0].fabric_state = GpuDevice::kFabricCompleted;
  r.gpu.devices[0].fabric_status = 999;
  r.gpu.devices[0].nvlinks = 17;
  r.gpu.nvml_error = "libnvidia-ml.so.1: cannot open shared object file";
  auto frame = encode(Hello{r, {}, {}, {}});
  auto back = decode_hello(std::span(frame).subspan(kHeaderSize));
  REQUIRE(back.ok());
  CHECK(back->record.gpu.devices == r.gpu.devices);
  CHECK(back->record.gpu.nccl_version == 22809);
  CHECK(back->record.gpu.driver == "580.65.06");
  CHECK(back->record.gpu.granted == 8);
  CHECK(back->record.gpu.granted_by == "SLURM_GPUS_ON_NODE=8");
  CHECK(back->record.gpu.nvml_error == r.gpu.nvml_error);

  StageReport report{{good(0, 2), good(1, 2)}};
  report.ranks[1].init_timed_out = true;
  report.ranks[1].init_error = "x";
  auto sf = encode(report);
  auto sb = decode_stage_report(std::span(sf).subspan(kHeaderSize));
  REQUIRE(sb.ok());
  REQUIRE(sb->ranks.size() == 2);
  CHECK(sb->ranks[0].allreduce_ok);
  CHECK(sb->ranks[0].expected == 3);
  CHECK(sb->ranks[1].init_timed_out);
  CHECK(sb->ranks[1].init_error == "x");
  CHECK(!decode_stage_report(std::span(sf).subspan(kHeaderSize, 10)).ok());
}

TEST_CASE("version texts") {
  CHECK(nccl_version_text(22809) == "2.28.9");
  CHECK(nccl_version_text(2708) == "2.7.8");
  CHECK(cuda_version_text(12080) == "12.8");
  CHECK(cuda_version_text(13000) == "13.0");
}

TEST_CASE("driver version from the kernel module banner") {
  // Proprietary and open kernel modules word the banner differently.
  CHECK(driver_version_from_banner("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  "
                                   "Sat Aug 19 01:15:15 UTC 2023") == "535.104.05");
  CHECK(driver_version_from_banner("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                   "555.58.02  Release Build  (dvs-builder@U16-I3-B03-4-3)  "
                                   "Tue Jun 25 01:26:06 UTC 2024") == "555.58.02");
  CHECK(driver_version_from_banner("NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15  "
                                   "Wed Jan 22 2025") == "570.86.15");
  CHECK(driver_version_from_banner("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64\t"
                                   "580.65") == "580.65");
  CHECK(driver_version_from_banner("Kernel Module  575.51.03") == "575.51.03");
  CHECK(driver_version_from_banner("NVRM version: something else 1.2.3").empty());
  CHECK(driver_version_from_banner("NVRM version: NVIDIA UNIX Kernel Module for x86_64").empty());
  CHECK(driver_version_from_banner("Kernel Module 1. .2 1..2 v1.2").empty());
  CHECK(driver_version_from_banner("").empty());
}

TEST_CASE("driver version from the name of libcuda's file") {
  CHECK(driver_version_from_library("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06") ==
        "580.65.06");
  CHECK(driver_version_from_library("libcuda.so.535.104.05") == "535.104.05");
  CHECK(driver_version_from_library("/usr/lib64/libcuda.so.1").empty());  // the soname
  CHECK(driver_version_from_library("/usr/lib64/libcuda.so").empty());
  CHECK(driver_version_from_library("/opt/lib/libfakegpu.so").empty());
  CHECK(driver_version_from_library("/x/libcuda.so.570.x").empty());
  CHECK(driver_version_from_library("").empty());
}

TEST_CASE("bytes as the timed all-reduce names them") {
  CHECK(bytes_text(100) == "100 bytes");
  CHECK(bytes_text(64 << 10) == "64 KiB");
  CHECK(bytes_text(1 << 20) == "1 MiB");
  CHECK(bytes_text(256ull << 20) == "256 MiB");
  CHECK(bytes_text(3ull << 29) == "1.5 GiB");
}

TEST_CASE("join tracker with GPUs: never clean when a GPU rule would find something") {
  std::minstd_rand rng(777);
  int harmless = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    JobView v = gpu_job(8, 4);
    for (int c = 0; c < 1 + int(rng() % 2); ++c) {
      GpuFacts& g = v.members[rng() % v.members.size()].record.gpu;
      switch (rng() % 10) {
        case 0:
          g.state = GpuState(rng() % 6);
          break;
        case 1:
          g.nccl_version = rng() % 2 ? 22105 : 22809;
          break;
        case 2:
          g.nccl_version = 0;
          break;
        case 3:
          g.driver = rng() % 2 ? "550.54.15" : "580.65.06";
          break;
        case 4:
          g.cuda_version = rng() % 2 ? 12080 : 13000;
          break;
        case 5:
          if (!g.devices.empty()) g.devices[0].uuid = uuid(int(rng() % 2), int(rng() % 4));
          break;
        case 6:
          g.devices.clear();
          break;
        case 7:
          g.nccl_path = "/elsewhere/libnccl.so.2";
          break;
        case 8:  // a MIG slice of another rank's GPU, or a GPU of its own
          if (!g.devices.empty()) {
            g.devices[0].pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + rng() % 4);
          }
          break;
        case 9:  // given more GPUs than it shows, or as many
          g.granted = int32_t(4 + rng() % 2);
          g.granted_by = fmt::format("SLURM_GPUS_ON_NODE={}", g.granted);
          break;
      }
    }
    INFO("trial " << trial);
    if (test::clean_and_silent(v)) ++harmless;
  }
  CHECK(harmless > 0);
}

TEST_CASE("nvlink: a fabric not up, and a GPU with links down") {
  JobView v = gpu_job(16, 8);
  for (Member& m : v.members) {
    GpuDevice& d = m.record.gpu.devices[0];
    d.fabric_state = GpuDevice::kFabricCompleted;
    d.nvlinks = 18;
  }
  CHECK(test::checks(v).empty());
  CHECK(tracker_clean(v));
  v.members[9].record.gpu.devices[0].fabric_state = GpuDevice::kFabricInProgress;
  v.members[12].record.gpu.devices[0].fabric_status = 999;
  v.members[3].record.gpu.devices[0].nvlinks = 17;
  auto fs = test::checks(v);
  REQUIRE(fs.size() == 2);
  CHECK(exit_code_for(fs) == 0);
  CHECK(fs[0].name() == "nvlink-fabric-down");
  CHECK(fs[0].ranks == Ranks{9, 12});
  CHECK(fs[0].message ==
        "GPUs whose NVLink fabric registration is not completed (NVML's fabric state) on gpu-02: "
        "00000000:19:00.0 (rank 9) in progress, 00000000:1C:00.0 (rank 12) completed with NVML "
        "error 999: NCCL uses multi-node NVLink only where every rank's is (src/mnnvl.cc), so the "
        "job's traffic between hosts goes over the network instead");
  CHECK(fs[1].name() == "nvlink-down");
  CHECK(fs[1].ranks == Ranks{3});
  CHECK(fs[1].message.starts_with(
      "GPUs with fewer NVLinks active than the job's other GPUs of their kind, on gpu-01: "
      "00000000:1B:00.0 (rank 3) has 17 of 18"));
  CHECK(!tracker_clean(v));
  // Links not read, or no NVLink at all (-1): nothing to compare.
  v = gpu_job(4, 4);
  v.members[1].record.gpu.devices[0].nvlinks = 12;
  CHECK(test::checks(v).empty());
}
