// NCCL releases with known faults (nccl/known_faults.h) and hosts with different
// numbers of ranks: the table's shape, and both findings on both paths of the decision.

#include <catch2/catch.hpp>

#include "helpers.h"
#include "nccl/known_faults.h"

using namespace rankcheck;

namespace {

// `world` ranks, `per_host` a host, every one with a usable GPU and NCCL `version`.
JobView gpu_job(int world, int per_host, int32_t version) {
  JobView v = test::healthy_job(world, per_host);
  v.gpu_stage = true;
  for (Member& m : v.members) {
    GpuFacts& g = m.record.gpu;
    g.state = GpuState::kUsable;
    g.nccl_version = version;
    g.devices = {GpuDevice{m.record.rank, m.record.local_rank, fmt::format("GPU-{}", m.record.rank),
                           "", "H100", 0}};
    m.record.arch = "x86_64";
  }
  return v;
}

void set_all_env(JobView& v, std::vector<EnvVar> env) {
  for (Member& m : v.members)
    test::set_env(m.record, env);
}

}  // namespace

TEST_CASE("the known faults: each row a range of releases, with its source and fix",
          "[nccl][faults]") {
  auto rows = nccl::known_faults();
  REQUIRE(rows.size() >= 3);
  nccl::Version previous = 0;
  for (const nccl::KnownFault& f : rows) {
    CHECK(f.first <= f.last);
    CHECK(f.first >= previous);  // oldest first
    previous = f.first;
    CHECK_FALSE(f.what.empty());
    CHECK_FALSE(f.source.empty());
    CHECK_FALSE(f.fix.empty());
    CHECK(nccl::in_release(f, f.first));
    CHECK(nccl::in_release(f, f.last));
    CHECK_FALSE(nccl::in_release(f, f.first - 1));
    CHECK_FALSE(nccl::in_release(f, f.last + 1));
    CHECK_FALSE(nccl::in_release(f, 0));  // no library loaded
  }
}

TEST_CASE("nccl-known-fault: 2.27.7's RAS segfault, unless NCCL_RAS_ENABLE=0", "[nccl][faults]") {
  JobView v = gpu_job(4, 2, 22707);
  CHECK_FALSE(test::tracker_clean(v));
  auto fs = test::checks(v);
  const Finding* f = test::find(fs, "nccl-known-fault");
  REQUIRE(f != nullptr);
  CHECK(f->severity == Severity::kWarning);
  CHECK_THAT(f->message, Catch::Contains("load NCCL 2.27.7") &&
                             Catch::Contains("rasMsgHandlePeersUpdate") &&
                             Catch::Contains("NVIDIA/nccl#1996") &&
                             Catch::Contains("NCCL_RAS_ENABLE=0 avoids it"));
  CHECK(f->ranks == std::vector<long>{0, 1, 2, 3});
  // Avoided, as NCCL reads the number ("0 " is 0 to strtoll); 1 is not.
  for (const char* off : {"0", "0 ", "0x0"}) {
    JobView quiet = v;
    set_all_env(quiet, {{"NCCL_RAS_ENABLE", off}});
    CHECK(test::clean_and_silent(quiet));
  }
  JobView on = v;
  set_all_env(on, {{"NCCL_RAS_ENABLE", "1"}});
  auto on_fs = test::checks(on);
  CHECK(test::find(on_fs, "nccl-known-fault") != nullptr);
  // The releases beside it, and a job without the GPU stage, say nothing.
  CHECK(test::clean_and_silent(gpu_job(4, 2, 22706)));
  CHECK(test::clean_and_silent(gpu_job(4, 2, 22803)));
  JobView no_stage = v;
  no_stage.gpu_stage = false;
  CHECK(test::clean_and_silent(no_stage));
}

TEST_CASE("nccl-known-fault: 2.28.9 to 2.29.2 hang on Arm hosts only", "[nccl][faults]") {
  JobView x86 = gpu_job(4, 2, 22902);
  CHECK(test::clean_and_silent(x86));
  JobView mixed = x86;
  for (Member& m : mixed.members) {
    if (m.record.host == "gpu-02") m.record.arch = "aarch64";
  }
  auto fs = test::checks(mixed);
  const Finding* f = test::find(fs, "nccl-known-fault");
  REQUIRE(f != nullptr);
  CHECK(f->hosts == std::vector<std::string>{"gpu-02"});
  CHECK_THAT(f->message, Catch::Contains("ncclLocalOpAppend") &&
                             Catch::Contains("NCCL 2.29.3's release notes"));
  CHECK_THAT(f->fix, Catch::Contains("2.29.3"));
  // The first release with the fix, and the last before the fault.
  for (int32_t clean : {22807, 22903}) {
    JobView v = mixed;
    for (Member& m : v.members)
      m.record.gpu.nccl_version = clean;
    CHECK(test::clean_and_silent(v));
  }
}

TEST_CASE("uneven-ranks-per-host: a host short of ranks, and 2.31's deadlock", "[nccl][faults]") {
  // 15 ranks as srun -n 15 packs them: 8 on gpu-01, 7 on gpu-02.
  JobView v = test::healthy_job(15, 8);
  auto fs = test::checks(v);
  const Finding* f = test::find(fs, "uneven-ranks-per-host");
  REQUIRE(f != nullptr);
  CHECK(f->severity == Severity::kWarning);
  CHECK_THAT(f->message,
             Catch::Contains("hosts carry different numbers of ranks: 8 ranks on gpu-01, 7 ranks "
                             "on gpu-02"));
  CHECK(f->hosts == std::vector<std::string>{"gpu-02"});
  CHECK(f->ranks.size() == 7);
  // Even hosts, and one host: nothing.
  CHECK(test::clean_and_silent(test::healthy_job(16, 8)));
  CHECK(test::clean_and_silent(test::healthy_job(8, 8)));
  // A rank missing: missing-rank explains the short host, not this.
  JobView missing = test::healthy_job(16, 8);
  missing.members.pop_back();
  auto missing_fs = test::checks(missing);
  CHECK(test::find(missing_fs, "missing-rank") != nullptr);
  CHECK(test::find(missing_fs, "uneven-ranks-per-host") == nullptr);
  // NCCL 2.31.2 deadlocks on it (nccl#2385): an error, with the reason and its fix.
  JobView nccl231 = gpu_job(15, 8, 23102);
  auto e_fs = test::checks(nccl231);
  const Finding* e = test::find(e_fs, "uneven-ranks-per-host");
  REQUIRE(e != nullptr);
  CHECK(e->severity == Severity::kError);
  CHECK_THAT(e->message,
             Catch::Contains("ncclCommInitRank deadlocks") && Catch::Contains("NVIDIA/nccl#2385"));
  CHECK_THAT(e->fix, Catch::Contains("before 2.31"));
  // Not a second finding of its own: the fault needs the job's shape.
  CHECK(test::find(e_fs, "nccl-known-fault") == nullptr);
  CHECK(test::clean_and_silent(gpu_job(16, 8, 23102)));
  // 2.30.7 (no such code) warns only.
  auto w_fs = test::checks(gpu_job(15, 8, 23007));
  REQUIRE(test::find(w_fs, "uneven-ranks-per-host") != nullptr);
  CHECK(test::find(w_fs, "uneven-ranks-per-host")->severity == Severity::kWarning);
}

TEST_CASE("uneven-ranks-per-host: node mode counts each member's ranks", "[nccl][faults]") {
  // Three init containers standing for 8, 8 and 4 ranks.
  JobView v = test::healthy_job(3, 1);
  v.world_size = 20;
  const int32_t first[] = {0, 8, 16}, count[] = {8, 8, 4};
  for (size_t i = 0; i < 3; ++i) {
    Record& r = v.members[i].record;
    r.rank = first[i];
    r.nranks = count[i];
    r.world_size = 20;
    r.local_rank = 0;
    r.local_world_size = count[i];
  }
  auto fs = test::checks(v);
  const Finding* f = test::find(fs, "uneven-ranks-per-host");
  REQUIRE(f != nullptr);
  CHECK_THAT(f->message, Catch::Contains("8 ranks on gpu-01 and gpu-02, 4 ranks on gpu-03"));
  CHECK(f->hosts == std::vector<std::string>{"gpu-03"});
}
