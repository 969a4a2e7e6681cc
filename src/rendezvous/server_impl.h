#pragma once
// The master's server, inside: its state, its connections and the steps that
// move them. Private to server.cc (deciding, sending, the GPU stage),
// server_accept.cc (accepting, the handshake, fairness between sources),
// server_relay.cc (host relays' connections and their channels) and
// server_rehearsal.cc (the rehearsal of NCCL's connections).

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <asio.hpp>
#include <fmt/format.h>

#include "base/version.h"
#include "host/interfaces.h"
#include "model/path.h"
#include "model/timeline.h"
#include "rehearsal/plan.h"
#include "rehearsal/probe.h"
#include "rendezvous/asio_io.h"
#include "rendezvous/relay.h"
#include "rendezvous/server.h"
#include "rendezvous/socket.h"

namespace rankcheck {

using asio::awaitable;
using asio::ip::tcp;
// Refusals logged to stderr one by one before they are only counted.
inline constexpr size_t kMaxRefusalsLogged = 8;
// How long the master waits for a member whose connection closed to come back
// when every other rank is in, before it decides without it.
inline constexpr Millis kRejoinGrace{1000};
// A handshake younger than this is never dropped to make room: an honest member
// completes its own in milliseconds, even among thousands from one address
// (a host's ranks behind one NAT address, a load generator), while a silent one
// is still dropped long before the handshake deadline.
inline constexpr Millis kEvictAfter{1000};
// Out of file descriptors: an address with more handshakes than this under way gives
// up to this many of its oldest silent ones each time accept fails.
inline constexpr size_t kMinEvictable = 8;
inline constexpr size_t kEvictOnEmfile = 64;
// What a relay may leave unread in the master's outbox while its channels are in
// their handshake: a host's burst of challenges and admissions is a few hundred
// bytes a member. A relay past it is closed, not waited for: one that opens
// channels and never reads would otherwise grow the master without bound.
inline constexpr size_t kMaxRelayBacklog = size_t{8} << 20;
// And all relays together: past this much unread in their outboxes, a relay past
// its own floor that opens more is closed. A hostile peer's relays share one budget.
inline constexpr size_t kMaxRelaysBacklog = size_t{16} << 20;
inline constexpr size_t kRelayBacklogFloor = size_t{256} << 10;
// Relays admitted from one address, and in all beyond the world size: a host runs
// one per job (pods of their own network namespace one each, behind one address
// when their node's address stands for them); more than that is someone opening
// relays to grow the master.
inline constexpr size_t kMaxRelaysPerSource = 64;
inline constexpr size_t kSpareRelays = 16;

// A member as the master tells a relayed one from its direct return: the same
// process (host and pid) standing for the same rank.
inline uint64_t relayed_key(const Record& r) {
  uint64_t h = std::hash<std::string_view>{}(r.host);  // no string formatted per member
  for (uint64_t v : {uint64_t{r.pid}, uint64_t(uint32_t(r.rank))})
    h = (h ^ v) * 0x100000001b3ull;
  return h;
}

struct Server::Impl {
  // Frames written at once on one connection, at most (pump).
  static constexpr size_t kMaxGather = 256;

  // Bound to the io_context's own executor rather than the type-erased default:
  // 40 bytes instead of 88 per member, and as much again in its pending wait.
  using Socket = tcp::socket::rebind_executor<asio::io_context::executor_type>::other;

  struct Conn {
    // Kept small: one lives as long as its member. The handshake timer and the
    // peer's address live in the handshake coroutine, which ends at admission.
    explicit Conn(Socket s) : sock(std::move(s)) {}
    explicit Conn(asio::io_context& io) : sock(io) {}  // a relayed member's: never opened
    // Where a connection is in its life. It only moves forward (advance), as gloo's
    // Pair::state does: a closed connection is never served again, a refused one
    // never admitted, a member's stage result never taken twice.
    enum class State : uint8_t {
      kHandshake,  // accepted (or a relay's channel opened): no hello taken yet; a
                   // connection of its own (not a channel) holds a handshake slot
      kRefused,    // turned away: its reply is being written, then it closes
      kAdmitted,   // a member of this job (or a host's relay)
      kReported,   // a member whose GPU stage result is in (or will never be)
      kReleased,   // finished with: its end closed, ours open until the report is out
      kClosed,
    };
    void advance(State to) {
      assert(to >= state);
      state = to;
    }
    bool closed() const { return state == State::kClosed; }
    /// Admitted and still open (a member that may still send, or be sent to).
    bool joined() const { return state >= State::kAdmitted && state < State::kClosed; }
    /// Joined and not yet released: counted among the open members (not a relay's).
    bool open_member() const {
      return (state == State::kAdmitted || state == State::kReported) && link == nullptr;
    }

    Socket sock;
    State state = State::kHandshake;
    int slot = -1;        // the member's index in the master state
    uint32_t source = 0;  // index into sources: the address it came from
    Outbox outbox;        // frames not yet written, oldest first
    // Why, beside where it is: its handshake ran out, or it was dropped to make room
    // for other sources (see make_room); and how its writes go.
    bool handshake_expired = false;
    bool evicted = false;
    bool pump_posted = false;  // a relay's: its frames go out after the current handler
    bool close_after_write = false;
    int path_host = -1;    // the host it rehearses NCCL's connections for, until it reports
    Nonce server_nonce{};  // what the verdict's MAC covers, with a job token
    Nonce client_nonce{};
    Clock::time_point accepted{};  // when its handshake began (see make_room)
    // A host's relay (relay.h): its connection carries channels, one per member.
    struct Link {
      std::string host;
      uint32_t pid = 0;
      SharedString peer;  // its members' too (Member::peer)
      std::unordered_map<uint32_t, std::shared_ptr<Conn>> channels;  // open ones
      std::vector<uint8_t> rx;  // the start of a frame its last read cut short
      size_t came_back = 0;     // members that joined directly while their channel was open
      // Fires at the oldest channel's handshake deadline while any waits for its hello.
      std::unique_ptr<asio::steady_timer> sweep;
      bool sweep_armed = false;
    };
    std::unique_ptr<Link> link;
    // A member that came through a relay: the relay's connection and its channel.
    // Its socket stays closed; its frames go through the relay's.
    std::weak_ptr<Conn> via;
    uint32_t channel = 0;
    bool relayed() const { return channel != 0; }
  };
  using ConnPtr = std::shared_ptr<Conn>;

  explicit Impl(ServerConfig c)
      : cfg(std::move(c)),
        state(cfg.master),
        decide_timer(io),
        progress_timer(io),
        stage_timer(io),
        rehearsal_timer(io) {
    conns.reserve(static_cast<size_t>(std::clamp(cfg.master.world_size, 1L, 1L << 16)));
  }

  ServerConfig cfg;
  MasterState state;
  asio::io_context io{1};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::string> bound;
  asio::steady_timer decide_timer;
  asio::steady_timer progress_timer;
  asio::steady_timer stage_timer;
  std::thread thread;

  // Everything below is touched only on the server thread (or after it stopped).
  // Where a relay's connection is read into, a burst at a time (read_relay).
  std::array<uint8_t, 64 * 1024> scratch{};
  // Challenge nonces, drawn from getrandom 256 at a time rather than a call each.
  std::array<uint8_t, 256 * kNonceSize> random_pool{};
  size_t random_used = sizeof random_pool;  // all used: the first nonce draws
  Status fresh_nonce(Nonce& out) {
    if (random_used + out.size() > random_pool.size()) {
      if (auto ok = fill_random(random_pool); !ok) return ok;
      random_used = 0;
    }
    std::memcpy(out.data(), random_pool.data() + random_used, out.size());
    random_used += out.size();
    return ok_status();
  }
  std::vector<ConnPtr> conns;  // conns[i] carries member i; nullptr for the master's own
  size_t pending = 0;
  size_t writes_in_flight = 0;
  size_t open_members = 0;  // admitted connections the member has not closed yet
  // Relays' connections whose end the relay has not closed yet: on a pass the server
  // is done only after those too, so that the master never closes MASTER_PORT's side
  // first (its TIME_WAIT would hold the port the training job binds next).
  size_t open_links = 0;
  size_t refusals = 0;
  size_t accept_errors = 0;
  // Connections in their handshake, by the address they came from: one address
  // holding most of the slots (a flood of silent connections) gives up its
  // oldest to newcomers. Bounded: past kMaxSources addresses, the rest share one.
  struct Source {
    std::string addr;
    size_t pending = 0;
    size_t evicted = 0;
    std::deque<std::weak_ptr<Conn>> queue;  // oldest first; some no longer pending
    Clock::time_point last_admit{};         // members keep arriving from it (see make_room)
    size_t relays = 0;                      // its relays open now (on_relay_hello)
  };
  static constexpr size_t kMaxSources = 4096;
  std::vector<Source> sources{Source{"other addresses", 0, 0, {}, {}, 0}};
  std::unordered_map<std::string, uint32_t> source_ids;
  // Members admitted through a relay, by host, pid and rank: the same process
  // joining directly after its relay died takes its place.
  std::unordered_map<uint64_t, std::weak_ptr<Conn>> relayed;  // see relayed_key
  size_t relays = 0;                                          // relays admitted
  std::vector<std::weak_ptr<Conn>> relay_conns;  // each relay admitted (the shared budget)
  size_t relays_lost = 0;  // relays whose connection closed before the decision
  size_t sockets = 0;      // connections open (accepted, not yet closed)
  size_t sockets_peak = 0;
  std::optional<std::promise<Verdict>> local_verdict;
  std::optional<std::promise<Verdict>> local_final;
  std::promise<void> done;
  bool done_set = false;
  bool rejoin_grace = false;  // the decide timer waits for a lost member, not the deadline

  // The rehearsal of NCCL's connections (rehearsal/plan.h), between the identity checks
  // and the verdict: one member per host probes, the master collects. Its state is its
  // own; its steps stay the server's, since each writes on members' connections and
  // ends in the decision. What its results mean is rules/paths.cc's.
  struct Rehearsal {
    bool running = false;
    bool done = false;       // ran, or was not wanted: the decision goes on
    bool timed_out = false;  // what decide() was called with
    std::vector<PathHost> hosts;
    std::vector<std::vector<PathTarget>> plans;  // per host
    std::vector<PathResult> results;             // every connection, filled as reports come
    size_t waiting = 0;                          // hosts that have not reported
    std::vector<bool> reported;
    // Hosts whose prober's report was refused (not the token's) or whose prober
    // left before reporting: their paths are unproven, and the job does not pass.
    std::vector<std::string> unproven;
    Clock::time_point started;
  } rehearsal;
  asio::steady_timer rehearsal_timer;
  std::thread local_probe;  // the master's own host's probes; joined in finish()

  void log(const std::string& line) const { cfg.master.log(line); }

  // ----- sending -------------------------------------------------------------

  void send(const ConnPtr& c, std::vector<uint8_t> frame);
  void send(const ConnPtr& c, Bytes frame);

  void pump(const ConnPtr& c);

  void close(const ConnPtr& c);

  // A member that is finished with: counted as closed, its socket left open.
  void release(const ConnPtr& c);

  // Done once every verdict is written and every member has closed its end: the
  // member closes first, so that the TIME_WAIT lands on its ephemeral port and not
  // on MASTER_PORT, which the training job binds next.
  void check_done();

  // ----- refusing ------------------------------------------------------------

  // Out of its handshake, into `to`: a connection of its own gives back its slot.
  void leave_handshake(const ConnPtr& c, Conn::State to);
  // Its GPU stage result is in, or will never be.
  static void mark_reported(const ConnPtr& c) {
    if (c->state < Conn::State::kReported) c->advance(Conn::State::kReported);
  }

  uint32_t source_of(const std::string& addr);

  // At the cap on handshakes: the address holding the most, if it holds more than
  // a quarter of them, loses its oldest one. A flood from one address then cannot
  // keep the job's members waiting in the kernel's backlog until the deadline.
  bool make_room(bool out_of_files = false);
  // What all open relays leave unread in their outboxes (drops closed ones' entries).
  size_t relays_backlog();

  void refuse(const ConnPtr& c, const std::string& peer, RefusalKind kind, std::string reason,
              std::optional<Record> record = std::nullopt,
              std::optional<RejectCode> reply = std::nullopt);

  // ----- serving -------------------------------------------------------------

  awaitable<void> accept_loop(tcp::acceptor& acceptor);

  awaitable<void> serve(ConnPtr c, std::string peer);
  // The first frame of every connection and channel, with its fresh nonce.
  std::vector<uint8_t> challenge_for(const Conn& c) const;

  // A hello read (on the member's connection, or on its relay's channel): the
  // checks, then admission or refusal.
  void on_hello(const ConnPtr& c, SharedString peer, std::span<const uint8_t> payload);

  // ----- relays (server_relay.cc) ----------------------------------------------

  // A relay's hello, read in place of a member's: the checks, then its channels
  // (read_relay). Neither the handshake's coroutine nor the hello's bytes live on
  // with the relay: 12,500 relays hold their Conn and one pending wait each.
  void on_relay_hello(const ConnPtr& c, const std::string& peer, std::span<const uint8_t> payload);
  // Waits until the relay's connection has bytes, then reads them (relay_readable).
  void read_relay(const ConnPtr& c);
  void relay_readable(const ConnPtr& c, std::error_code ec);
  // Hands on every whole channel frame among the `got` bytes just read into `scratch`
  // (after a cut frame's start kept in the link's rx); false, with `why`, on one that
  // is not a channel frame or does not decode.
  bool take_channel_frames(const ConnPtr& c, size_t got, std::string& why);
  void on_channel(const ConnPtr& link, ChannelFrame frame);
  // Each channel has the handshake deadline of a connection: those without a
  // hello by then are refused (sweep_channels), on one timer per relay.
  void arm_channel_sweep(const ConnPtr& link, Clock::time_point at);
  void sweep_channels(const ConnPtr& link);
  void on_channel_frame(const ConnPtr& c, std::span<const uint8_t> frame);
  // The member behind a channel closed its end (or its relay is gone).
  void on_channel_closed(const ConnPtr& c);
  void relay_closed(const ConnPtr& link);
  // The relayed copy of a member now joining directly: gone, before it is counted twice.
  void forget_relayed(const Record& rec);

  // An admitted member sends nothing more until the verdict: a read that ends
  // means it is gone. A plain handler, not a coroutine frame, per member.
  void watch(const ConnPtr& c);

  // A member's GPU stage results; anything else (or nothing) counts as none.
  awaitable<void> read_stage_result(ConnPtr c);
  // The frame read in its place (or nothing: `type` 0), whichever way it came.
  void stage_result_in(const ConnPtr& c, uint16_t type, std::span<const uint8_t> payload,
                       std::string why);

  void deliver(size_t i, std::vector<RankResult> results);

  void depart(const ConnPtr& c);

  // ----- deciding ------------------------------------------------------------

  void maybe_decide();

  void decide(bool timed_out);

  // The roots of a scalable NCCL init, to every member before its go verdict.
  void send_roots(const std::vector<NcclIdBytes>& roots);

  // The GPU stage is over (every result in, or its deadline): the final verdict.
  void finalize();

  // Sends `base` to every member, each with the findings that name its ranks;
  // the master's own member gets it through `local`. `timed` records how long it
  // took in the report. Members are served kBroadcastChunk at a time, the event loop
  // writing out each chunk's frames before the next is made: 100k signed verdicts
  // queued at once would hold about 30 MB. One broadcast at a time, in order.
  struct Broadcast {
    Verdict base;
    Bytes shared;  // the frame of every member without notes, without a token
    std::optional<std::promise<Verdict>>* local;
    size_t next = 0;
    Clock::time_point t0;
    bool timed;
  };
  static constexpr size_t kBroadcastChunk = 4096;
  std::deque<Broadcast> broadcasts;  // the front one is under way
  void broadcast(const Verdict& base, std::optional<std::promise<Verdict>>& local, bool timed);
  void broadcast_some();

  void schedule_progress();

  // ----- rehearsing NCCL's connections (server_rehearsal.cc) -------------------

  // Starts the rehearsal when it is wanted (every rank in, no error so far, hosts
  // to connect); false when the decision goes on without one.
  bool start_rehearsal(bool timed_out);
  awaitable<void> read_path_report(ConnPtr c);
  void path_report_in(const ConnPtr& c, size_t host, std::optional<PathReport> got);
  /// The report in a frame of `type`, if it is one that decodes and, with a job
  /// token, carries its MAC over c's nonces; nullopt (logged) otherwise.
  std::optional<PathReport> take_path_report(const ConnPtr& c, uint16_t type,
                                             std::span<const uint8_t> payload);
  void path_report(size_t host, std::vector<PathResult> results);
  // All reports in, or out of time: the findings, then the decision.
  void end_rehearsal();
};

}  // namespace rankcheck
