// The rendezvous over MPI, for rankcheck-mpi under mpirun: records are gathered
// at MPI rank 0, which decides with the same MasterState as the TCP master, and
// verdicts, the NCCL id and the stage results travel as the same encoded
// messages. Every collective is non-blocking and polled against the deadline.

#include <cstdio>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <mpi.h>

#include "app/bootstrap.h"
#include "app/master_run.h"
#include "base/interrupt.h"
#include "base/text.h"
#include "host/procfs.h"
#include "master/master_state.h"
#include "protocol/record_codec.h"
#include "rendezvous/member.h"
#include "rules/self.h"

namespace rankcheck {
namespace {

// Waits for a non-blocking collective, or gives up at the deadline.
bool wait(MPI_Request& req, Deadline deadline) {
  int done = 0;
  while (true) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (deadline.expired() || interrupted()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class Mpi {
 public:
  Mpi(int rank, int size, Deadline deadline) : rank_(rank), size_(size), deadline_(deadline) {}

  /// Every process's bytes, at rank 0 (empty elsewhere); nullopt past the deadline.
  std::optional<std::vector<std::vector<uint8_t>>> gather(const std::vector<uint8_t>& mine) {
    int n = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<size_t>(rank_ == 0 ? size_ : 0));
    MPI_Request req;
    MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    if (!wait(req, deadline_)) return std::nullopt;
    std::vector<int> displs(sizes.size());
    int total = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      displs[k] = total;
      total += sizes[k];
    }
    std::vector<uint8_t> all(static_cast<size_t>(total));
    MPI_Igatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, 0,
                 MPI_COMM_WORLD, &req);
    if (!wait(req, deadline_)) return std::nullopt;
    std::vector<std::vector<uint8_t>> out;
    for (size_t k = 0; k < sizes.size(); ++k) {
      out.emplace_back(all.begin() + displs[k], all.begin() + displs[k] + sizes[k]);
    }
    return out;
  }

  /// Rank 0 hands process k parts[k]; every process gets its own.
  std::optional<std::vector<uint8_t>> scatter(const std::vector<std::vector<uint8_t>>& parts) {
    std::vector<int> sizes;
    std::vector<int> displs;
    std::vector<uint8_t> all;
    for (const auto& p : parts) {
      sizes.push_back(static_cast<int>(p.size()));
      displs.push_back(static_cast<int>(all.size()));
      all.insert(all.end(), p.begin(), p.end());
    }
    int n = 0;
    MPI_Request req;
    MPI_Iscatter(sizes.data(), 1, MPI_INT, &n, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    if (!wait(req, deadline_)) return std::nullopt;
    std::vector<uint8_t> mine(static_cast<size_t>(n));
    MPI_Iscatterv(all.data(), sizes.data(), displs.data(), MPI_BYTE, mine.data(), n, MPI_BYTE, 0,
                  MPI_COMM_WORLD, &req);
    if (!wait(req, deadline_)) return std::nullopt;
    return mine;
  }

 private:
  int rank_;
  int size_;
  Deadline deadline_;
};

std::vector<uint8_t> record_bytes(const Record& r) {
  Writer w;
  encode_record(w, r);
  return w.take();
}

// The payload of an encoded frame (the helpers here move whole frames).
std::span<const uint8_t> payload(const std::vector<uint8_t>& frame) {
  return std::span(frame).subspan(std::min(frame.size(), kHeaderSize));
}

// Each process's copy of the verdict, with the findings that name its ranks.
std::vector<std::vector<uint8_t>> verdicts(const MasterState& master, const Verdict& v,
                                           const std::vector<long>& member_of) {
  std::vector<std::vector<uint8_t>> frames;
  for (long m : member_of) {
    Verdict own = v;
    if (m >= 0) own.notes = master.notes_for(size_t(m));
    frames.push_back(encode(own));
  }
  return frames;
}

int run(const Identity& id, Record& self, Session& s) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    s.log.progress("MPI_Init failed: is this process started by mpirun?");
    return exit_code::kUsage;
  }
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Mpi mpi(rank, size, s.time.end());
  auto lost = [&](const char* step) {
    s.log.progress(
        fmt::format("MPI {} did not complete by the deadline: a process of the job is stuck "
                    "or gone; leaving without MPI_Finalize",
                    step));
    MemberReport m =
        failure_report(self, mpi_step_lost(self, step), ms_between(s.start, Clock::now()));
    return print_member(m, s.out);  // no MPI_Finalize: it would wait for the stuck process
  };

  // Records to MPI rank 0, which is the master whatever RANK says.
  auto records = mpi.gather(record_bytes(self));
  if (!records) return lost("gather of the records");
  std::optional<MasterState> master;
  std::vector<std::vector<uint8_t>> frames;
  std::vector<long> member_of(size_t(size), -1);  // MPI rank -> member index (-1: refused)
  if (rank == 0) {
    master.emplace(master_config(id, self, s, MasterTransport::kMpi));
    for (int k = 0; k < size; ++k) {
      Reader r((*records)[size_t(k)]);
      Record rec = decode_record(r);
      r.expect_end();
      if (!r.ok()) {
        master->refuse(RefusalKind::kMalformed, fmt::format("MPI rank {}", k), r.error());
        continue;
      }
      member_of[size_t(k)] =
          static_cast<long>(master->admit(std::move(rec), fmt::format("MPI rank {}", k), k == 0));
    }
    // Everyone in the communicator is here: nobody else can come.
    const Verdict& v = master->decide(
        {.bound = {fmt::format("MPI_COMM_WORLD of {}", size)}, .process = process_facts()});
    frames = verdicts(*master, v, member_of);
  }
  auto mine = mpi.scatter(frames);
  if (!mine) return lost("scatter of the verdict");
  auto verdict = decode_verdict(payload(*mine));
  if (!verdict) return lost("verdict decoding");

  if (!verdict->final && verdict->run_gpu && verdict->nccl_id) {
    StageReport results = s.run_gpu_stage(*verdict, id.world_size);
    auto all = mpi.gather(encode(results));
    if (!all) return lost("gather of the GPU stage results");
    frames.clear();
    if (rank == 0) {
      for (int k = 0; k < size; ++k) {
        if (member_of[size_t(k)] < 0) continue;
        auto got = decode_stage_report(payload((*all)[size_t(k)]));
        master->accept_results(size_t(member_of[size_t(k)]),
                               got ? std::move(got->ranks) : std::vector<RankResult>{});
      }
      frames = verdicts(*master, master->finalize(), member_of);
    }
    mine = mpi.scatter(frames);
    if (!mine) return lost("scatter of the final verdict");
    verdict = decode_verdict(payload(*mine));
    if (!verdict) return lost("final verdict decoding");
  }
  int code = 0;
  if (rank == 0) {
    Report report = master->report();
    report.total_ms = ms_between(s.start, Clock::now());
    code = print_report(report, s.out);
  } else {
    code = print_member(verdict_report(self, *verdict, ms_between(s.start, Clock::now())), s.out);
  }
  // mpirun kills the whole job as soon as one process exits non-zero: nobody
  // leaves before everybody has printed, or rank 0's report could be cut off
  // (a large job's report takes a while; the watchdog still ends it all).
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  if (!wait(req, Deadline::after(Millis(5000)).sooner(s.time.verdict_by()))) {
    s.log.progress(
        "leaving without MPI_Finalize: a process of the job did not finish printing in time");
    return code;
  }
  MPI_Finalize();
  return code;
}

}  // namespace

bool have_mpi_bootstrap() {
  return true;
}

int run_over_mpi(const Identity& id, Record& self, Session& s) {
  return run(id, self, s);
}

}  // namespace rankcheck
