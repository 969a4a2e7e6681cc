#include "diagnose/live.h"

#include <cstring>

#include "base/text.h"

namespace rankcheck::diagnose {
namespace {

// Each marker's text as the program prints it, read at the versions
// research/job-phases.md names. Only INFO-level lines of NCCL mark a phase: at
// NCCL_DEBUG=WARN (or unset) NCCL says nothing of its init.
constexpr PhaseMarker kMarkers[] = {
    {"nccl-bootstrap", JobPhase::kInit, "NCCL INFO Bootstrap", "",
     "NCCL src/bootstrap.cc bootstrapNetInit: 'Bootstrap : Using' (<= 2.23), 'Bootstrap: Using' "
     "(2.24+)"},
    {"nccl-init-start", JobPhase::kInit, "Init START", "NCCL INFO",
     "NCCL src/init.cc: '... - Init START' (2.18-2.28), before the bootstrap"},
    {"nccl-init-complete", JobPhase::kInitDone, "Init COMPLETE", "NCCL INFO",
     "NCCL src/init.cc: '... - Init COMPLETE' (2.18-2.28)"},
    {"store-barrier", JobPhase::kInit, "to store for rank:", "Added key:",
     "torch.distributed distributed_c10d.py _store_based_barrier (1.13): 'Added key: ... to store "
     "for rank: N'"},
    {"store-barrier", JobPhase::kInit, "Waiting in store based barrier", "",
     "torch.distributed distributed_c10d.py _store_based_barrier (1.13-2.x)"},
    {"store-barrier-done", JobPhase::kInitDone, "Completed store-based barrier", "",
     "torch.distributed distributed_c10d.py _store_based_barrier (1.13-2.x)"},
    {"torchrun-rendezvous", JobPhase::kInit, "Rendezvous'ing worker group", "",
     "torch.distributed.elastic agent/server/api.py (1.13): the agent's rendezvous, LOGLEVEL=INFO"},
    {"torchrun-rendezvous", JobPhase::kInit, "attempts to join the next round of the rendezvous",
     "", "torch.distributed.elastic rendezvous/dynamic_rendezvous.py (1.13)"},
    {"torchrun-rendezvous", JobPhase::kInit, "Rendezvous complete for workers", "",
     "torch.distributed.elastic agent/server/api.py (1.13)"},
};

bool holds(std::string_view line, std::string_view what) {
  return what.empty() || line.find(what) != std::string_view::npos;
}

}  // namespace

std::span<const PhaseMarker> phase_markers() {
  return kMarkers;
}

const PhaseMarker* marker_of(std::string_view line) {
  const PhaseMarker* best = nullptr;
  for (const PhaseMarker& m : kMarkers) {
    if ((best == nullptr || m.phase > best->phase) && holds(line, m.literal) && holds(line, m.also))
      best = &m;
  }
  return best;
}

LiveReader::LiveReader(Sink sink) : sink_(std::move(sink)), scanner_(std::make_unique<Scanner>()) {
  scanner_->begin_source("-");
  scanner_->observe([this](const LineMatch& m) {
    // What a line says of the process that printed it: an error of its own (a setup
    // it got wrong, an exception it raised) or one that points elsewhere (a peer
    // gone, a timeout, a launcher stopping it). Context and rankcheck's own words are
    // neither; a line no row explains is left to the exit that follows it.
    bool own = m.cls == MessageClass::kSetup || m.cls == MessageClass::kOwnError;
    bool elsewhere = m.cls == MessageClass::kPeerPointer ||
                     m.cls == MessageClass::kCollectiveTimeout ||
                     m.cls == MessageClass::kKilledByLauncher ||
                     m.cls == MessageClass::kPeersAbsent || m.role == Role::kDownstream;
    LineRole role;
    if (own && m.role != Role::kDownstream && !said_initiating_) {
      said_initiating_ = true;
      role = LineRole::kInitiating;
    } else if (elsewhere && !own && !said_downstream_) {
      said_downstream_ = true;
      role = LineRole::kDownstream;
    } else {
      return;
    }
    LiveNote n;
    n.kind = LiveNote::Kind::kLine;
    n.role = role;
    n.finding = m.finding;
    n.text = printable(m.text, kWatchTextMax);
    sink_(n);
  });
}

LiveReader::~LiveReader() = default;

void LiveReader::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const void* nl = std::memchr(bytes.data(), '\n', bytes.size());
    size_t n = nl == nullptr ? bytes.size()
                             : static_cast<size_t>(static_cast<const char*>(nl) - bytes.data());
    if (!partial_cut_) {
      size_t room = kMaxLine - partial_.size();
      partial_.append(bytes.data(), std::min(n, room));
      partial_cut_ = n > room;
    }
    if (nl == nullptr) return;
    line(partial_);
    partial_.clear();
    partial_cut_ = false;
    bytes.remove_prefix(n + 1);
  }
}

void LiveReader::end() {
  if (!partial_.empty()) line(partial_);
  partial_.clear();
  partial_cut_ = false;
}

std::string LiveReader::last_line() const {
  return printable(last_, kWatchTextMax);
}

void LiveReader::line(std::string_view text) {
  ++lines_;
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  // A carriage return redraws a progress bar: what shows is after the last one.
  if (auto cr = text.rfind('\r'); cr != std::string_view::npos) text.remove_prefix(cr + 1);
  if (trim_blanks(text).empty()) return;
  last_.assign(trim_blanks(text).substr(0, kWatchTextMax));
  if (phase_ < JobPhase::kInitDone) {
    if (const PhaseMarker* m = marker_of(text); m != nullptr && m->phase > phase_) {
      phase_ = m->phase;
      LiveNote n;
      n.kind = LiveNote::Kind::kMarker;
      n.marker = m;
      n.text = last_line();
      sink_(n);
    }
  }
  if (!said_initiating_ || !said_downstream_) scanner_->line(text);
}

}  // namespace rankcheck::diagnose
