#pragma once
// Shared builders for unit tests.

#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "../env_text.h"
#include "base/env.h"
#include "rules/join_tracker.h"
#include "rules/rules.h"

namespace rankcheck::test {

inline EnvMap env_fixture(const std::string& name) {
  std::ifstream in(std::string(RANKCHECK_FIXTURES) + "/env/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto env = parse_env_text(ss.str());
  REQUIRE(env.ok());
  return *env;
}

/// A record as a healthy rank-mode member of a job would send it.
inline Record member(int rank, int world, std::string host, int local_rank = -1,
                     int local_world = -1) {
  Record r;
  r.version = "0.1.0";
  r.rank = rank;
  r.world_size = world;
  r.local_rank = local_rank;
  r.local_world_size = local_world;
  r.host = std::move(host);
  r.pid = static_cast<uint32_t>(1000 + rank);
  r.launcher = "torch";
  r.master_addr = "node01";
  r.master_port = 29500;
  r.master_resolved = {"10.0.0.11"};
  r.interfaces = {"lo", "eth0"};
  r.env_digest = env_digest(r.env.get());
  return r;
}

/// A job of `world` ranks on hosts of `per_host` ranks named gpu-01, gpu-02, ...
inline JobView healthy_job(int world, int per_host) {
  JobView v;
  v.world_size = world;
  v.job_id = "48213";
  v.master_addr = "node01";
  v.master_port = 29500;
  v.master_host = "gpu-01";
  v.master_resolved = {"10.0.0.11"};
  v.authenticated = true;  // no no-job-token warning: its own tests clear this
  for (int k = 0; k < world; ++k) {
    char host[16];
    std::snprintf(host, sizeof host, "gpu-%02d", k / per_host + 1);
    std::string peer = fmt::format("10.0.0.{}:{}", 10 + k / per_host, 40000 + k);
    v.members.push_back(Member{member(k, world, host, k % per_host, per_host), 10.0 + k,
                               k == 0 ? std::string("in-process") : peer});
  }
  return v;
}

inline void set_env(Record& r, std::vector<EnvVar> env) {
  r.env = std::move(env);
  r.env_digest = env_digest(r.env.get());
}

inline const Finding* find(const std::vector<Finding>& fs, const std::string& id) {
  for (const Finding& f : fs) {
    if (f.name() == id) return &f;
  }
  return nullptr;
}

/// The one finding in `fs`, which must hold exactly one.
inline Finding sole(const std::vector<Finding>& fs) {
  REQUIRE(fs.size() == 1);
  return fs[0];
}

/// Whether the join tracker, fed the members of `v` as the master feeds it (and told of
/// what taints it: refusals, departures, failed accepts, lost relays), calls the job
/// clean: the decision then runs only run_always().
inline bool tracker_clean(const JobView& v) {
  JoinTracker t(v.world_size, v.master_resolved, v.gpu_stage);
  for (const Member& m : v.members)
    t.add(m.record, m.peer);
  if (!v.refused.empty() || !v.departed.empty() || v.accept_failures.count > 0 ||
      !v.lost_relays.empty())
    t.taint();
  return t.clean();
}

/// The rules over `v`, as run_checks() gives them; on the way, that the decision's
/// other path agrees: a job the tracker calls clean gets no finding beyond
/// run_always()'s. Every rule test goes through here, so that each fixture is held
/// to both paths.
inline std::vector<Finding> checks(const JobView& v) {
  std::vector<Finding> fs = run_checks(v);
  if (tracker_clean(v)) {
    std::vector<Finding> always = run_always(v);
    INFO("the tracker called the job clean, yet the rules found "
         << fs.size() << " findings" << (fs.empty() ? "" : ", first ")
         << (fs.empty() ? "" : fs[0].name()));
    CHECK(fs.size() == always.size());
  }
  return fs;
}

/// Whether the tracker calls `v` clean and the rules find nothing in it but
/// run_always()'s findings.
inline bool clean_and_silent(const JobView& v) {
  bool clean = tracker_clean(v);
  auto fs = checks(v);
  return clean && fs.size() == run_always(v).size();
}

}  // namespace rankcheck::test
