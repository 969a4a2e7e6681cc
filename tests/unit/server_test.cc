#include "rendezvous/server.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous/member.h"

using namespace rankcheck;

namespace {

ServerConfig config(std::vector<std::string>* lines) {
  ServerConfig cfg;
  cfg.master.world_size = 2;
  cfg.master.log = [lines](const std::string& l) { lines->push_back(l); };
  return cfg;
}

std::set<int> socket_fds() {
  std::set<int> out;
  DIR* d = ::opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    char target[256] = {};
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, size_t(n)).rfind("socket:", 0) == 0) {
      out.insert(std::stoi(e->d_name));
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

TEST_CASE("server: one address that binds is enough; the others are logged") {
  std::vector<std::string> lines;
  Server s(config(&lines));
  // 192.0.2.1 (TEST-NET-1) is no address of this host: EADDRNOTAVAIL, as ::1 is
  // where IPv6 is off.
  auto port = s.listen({"127.0.0.1", "192.0.2.1"}, 0);
  REQUIRE(port.ok());
  CHECK(*port > 0);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == fmt::format("cannot listen on 192.0.2.1:{}: Cannot assign requested "
                                "address; listening on 127.0.0.1 only",
                                *port));
}

TEST_CASE("server: no address that binds is master-addr-not-local, naming each") {
  std::vector<std::string> lines;
  Server s(config(&lines));
  auto port = s.listen({"fe80::1", "192.0.2.1"}, 29999);
  REQUIRE(!port.ok());
  CHECK(port.error().fault == Fault::kNotLocal);
  CHECK(port.error().message ==
        "cannot listen on 192.0.2.1:29999: Cannot assign requested address; cannot listen on "
        "[fe80::1]:29999: Invalid argument");
}

TEST_CASE("server: an error other than in-use or not-local says so") {
  std::vector<std::string> lines;
  Server s(config(&lines));
  auto port = s.listen({"fe80::1"}, 29999);  // link-local without a scope: EINVAL
  REQUIRE(!port.ok());
  CHECK(port.error().fault == Fault::kListen);
  CHECK(port.error().message == "cannot listen on [fe80::1]:29999: Invalid argument");
}

TEST_CASE("server: a port in use on any address fails, as it would fail the training job") {
  int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(holder >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  uint16_t taken = ntohs(sa.sin_port);
  std::vector<std::string> lines;
  {
    Server s(config(&lines));
    auto port = s.listen({"192.0.2.1", "127.0.0.1"}, taken);
    REQUIRE(!port.ok());
    CHECK(port.error().fault == Fault::kInUse);
    CHECK(port.error().message ==
          fmt::format("cannot listen on 127.0.0.1:{}: Address already in use", taken));
  }
  ::close(holder);
}

TEST_CASE("server: a port below 1024 without the privilege is denied, not in use") {
  if (::geteuid() == 0) {
    WARN("skipped: root may listen on any port");
    return;
  }
  std::vector<std::string> lines;
  Server s(config(&lines));
  auto port = s.listen({"127.0.0.1"}, 1);
  REQUIRE(!port.ok());
  CHECK(port.error().fault == Fault::kDenied);
}

TEST_CASE("server: listening sockets are not inherited by the programs it starts") {
  std::set<int> before = socket_fds();
  std::vector<std::string> lines;
  Server s(config(&lines));
  REQUIRE(s.listen({"127.0.0.1", "::1"}, 0).ok());
  std::set<int> after = socket_fds();
  size_t fresh = 0;
  for (int fd : after) {
    if (before.count(fd) != 0) continue;
    ++fresh;
    CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  }
  CHECK(fresh >= 1);
}

namespace {

Record gpu_member(int rank) {
  Record r;
  r.version = "0.1.0";
  r.rank = rank;
  r.world_size = 2;
  r.local_rank = rank;
  r.local_world_size = 2;
  r.host = "gpu-01";
  r.pid = static_cast<uint32_t>(1000 + rank);
  r.launcher = "torch";
  r.master_addr = "127.0.0.1";
  r.master_port = 29500;
  r.master_resolved = {"127.0.0.1"};
  r.env_digest = env_digest(r.env.get());
  r.gpu.state = GpuState::kUsable;
  r.gpu.cuda_version = 13000;
  r.gpu.device_count = 2;
  r.gpu.nccl_version = 22809;
  r.gpu.devices = {GpuDevice{rank, rank, fmt::format("GPU-0{}00-0000-0000-0000-000000000000", rank),
                             fmt::format("00000000:1{}:00.0", rank), "NVIDIA H200", 141ull << 30}};
  return r;
}

RankResult good(int rank) {
  RankResult r;
  r.rank = rank;
  r.init_ok = r.allreduce_ok = r.allreduce_done = true;
  r.expected = r.got = 3;
  return r;
}

// A job of two with a job token: rank 0 in process, rank 1 over loopback. Rank 1
// hands in its stage results as `frame` makes them; the final report.
Report stage_with(
    const std::function<std::vector<uint8_t>(const StageReport&, const JoinResult&)>& frame,
    std::vector<std::string>& lines) {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  ServerConfig cfg = config(&lines);
  cfg.token = token;
  cfg.master.gpu_stage = true;
  cfg.master.job_id = "job-a";
  cfg.master.make_nccl_id = [] { return Result<NcclId>(NcclId{}); };
  cfg.master.stage_by = Deadline::after(Millis(10000));
  cfg.decide_by = Deadline::after(Millis(5000));
  Server server(cfg);
  auto port = server.listen({"127.0.0.1"}, 0);
  REQUIRE(port.ok());
  server.start();
  auto own = server.join_local(gpu_member(0));

  Record self = gpu_member(1);
  JoinOptions jo;
  jo.master_addr = "127.0.0.1";
  jo.master_port = *port;
  jo.give_up = Deadline::after(Millis(5000));
  jo.token = &token;
  JoinResult joined = join_master(self, jo);
  REQUIRE(!joined.failure);
  auto go = wait_verdict(joined.socket, Deadline::after(Millis(5000)), joined, &token);
  REQUIRE(go.ok());
  REQUIRE(go->run_gpu);
  REQUIRE(own.get().run_gpu);
  REQUIRE(joined.socket
              .write_all(frame(StageReport{{good(1)}, {}}, joined), Deadline::after(Millis(1000)))
              .ok());
  auto own_final = server.submit_local(StageReport{{good(0)}, {}});
  (void)wait_verdict(joined.socket, Deadline::after(Millis(5000)), joined, &token,
                     VerdictWait::kFinal);
  (void)own_final.get();
  return server.finish(Deadline::after(Millis(2000)));
}

}  // namespace

TEST_CASE("server: with a job token, a stage result counts only with its MAC") {
  JobToken token = JobToken::from_secret("0123456789abcdef-job-token");
  std::vector<std::string> lines;
  Report signed_one = stage_with(
      [&token](const StageReport& m, const JoinResult& j) {
        return encode_signed(m, token, j.server_nonce, j.client_nonce);
      },
      lines);
  CHECK(signed_one.exit_code() == 0);
  CHECK(signed_one.stage_results.size() == 2);

  // Results anyone on the path could have written: rank 1 counts as silent.
  lines.clear();
  Report unsigned_one =
      stage_with([](const StageReport& m, const JoinResult&) { return encode(m); }, lines);
  CHECK(unsigned_one.exit_code() == exit_code::kGpu);
  REQUIRE(unsigned_one.stage_results.size() == 1);
  CHECK(unsigned_one.stage_results[0].rank == 0);
  bool logged = false;
  for (const std::string& l : lines)
    logged = logged || l.find(
                           "its GPU stage result is unreadable: its MAC does not verify with "
                           "the job token") != std::string::npos;
  CHECK(logged);
}

TEST_CASE("server: rank 0's own result first does not end the stage before the others'") {
  // Rank 0 reports, then rank 1 after a while: rank 0's final verdict waits for
  // rank 1's result, and counts it (a go verdict handed back would end the run).
  std::vector<std::string> lines;
  ServerConfig cfg = config(&lines);
  cfg.master.gpu_stage = true;
  cfg.master.make_nccl_id = [] { return Result<NcclId>(NcclId{}); };
  cfg.master.stage_by = Deadline::after(Millis(20000));
  cfg.decide_by = Deadline::after(Millis(5000));
  Server server(cfg);
  auto port = server.listen({"127.0.0.1"}, 0);
  REQUIRE(port.ok());
  server.start();
  auto own = server.join_local(gpu_member(0));
  Record self = gpu_member(1);
  JoinOptions jo;
  jo.master_addr = "127.0.0.1";
  jo.master_port = *port;
  jo.give_up = Deadline::after(Millis(5000));
  JoinResult joined = join_master(self, jo);
  REQUIRE(!joined.failure);
  auto go = wait_verdict(joined.socket, Deadline::after(Millis(5000)), joined, nullptr);
  REQUIRE(go.ok());
  REQUIRE(go->run_gpu);
  REQUIRE(own.get().run_gpu);
  auto own_final = server.submit_local(StageReport{{good(0)}, {}});
  CHECK(own_final.wait_for(Millis(1000)) == std::future_status::timeout);
  REQUIRE(joined.socket.write_all(encode(StageReport{{good(1)}, {}}), Deadline::after(Millis(1000)))
              .ok());
  auto last = wait_verdict(joined.socket, Deadline::after(Millis(5000)), joined, nullptr,
                           VerdictWait::kFinal);
  REQUIRE(last.ok());
  CHECK(last->final);
  CHECK(last->exit_code == 0);
  REQUIRE(own_final.wait_for(Millis(5000)) == std::future_status::ready);
  Verdict mine = own_final.get();
  CHECK(mine.final);
  CHECK(mine.exit_code == 0);
  Report r = server.finish(Deadline::after(Millis(2000)));
  CHECK(r.exit_code() == 0);
  CHECK(r.stage_results.size() == 2);
}

TEST_CASE("server: a member of the previous protocol version is told so, not called malformed") {
  std::vector<std::string> lines;
  ServerConfig cfg = config(&lines);
  cfg.decide_by = Deadline::after(Millis(1500));
  Server server(cfg);
  auto port = server.listen({"127.0.0.1"}, 0);
  REQUIRE(port.ok());
  server.start();
  auto own = server.join_local(gpu_member(0));

  // Rank 1 of version 1 (before a stage result carried NCCL's words): its hello,
  // in its own version's frame.
  auto sock = Socket::connect("127.0.0.1", *port, Deadline::after(Millis(2000)));
  REQUIRE(sock.ok());
  REQUIRE(sock->read_frame(Deadline::after(Millis(2000))).ok());  // the challenge
  auto hello = encode(Hello{gpu_member(1), {}, {}, {}});
  std::vector<uint8_t> payload(hello.begin() + kHeaderSize, hello.end());
  REQUIRE(sock->write_all(encode_frame(MsgType::kHello, payload, 1), Deadline::after(Millis(1000)))
              .ok());
  auto answer = sock->read_frame(Deadline::after(Millis(2000)));
  REQUIRE(answer.ok());
  REQUIRE(answer->header.type == uint16_t(MsgType::kReject));
  auto reject = decode_reject(answer->payload);
  REQUIRE(reject.ok());
  CHECK(reject->code == RejectCode::kVersion);
  CHECK(reject->reason ==
        fmt::format("peer speaks rankcheck protocol version 1, this master speaks {}",
                    kProtocolVersion));

  (void)own.get();
  Report r = server.finish(Deadline::after(Millis(2000)));
  bool mismatch = false;
  for (const Finding& f : r.findings)
    mismatch = mismatch || f.name() == "protocol-mismatch";
  CHECK(mismatch);
  for (const Finding& f : r.findings)
    CHECK(f.message.find("malformed") == std::string::npos);
}

TEST_CASE("server: a stage result in the previous protocol version's frame is named so") {
  std::vector<std::string> lines;
  Report old = stage_with(
      [](const StageReport& m, const JoinResult&) {
        auto frame = encode(m);
        std::vector<uint8_t> payload(frame.begin() + kHeaderSize, frame.end());
        return encode_frame(MsgType::kStageResult, payload, 1);
      },
      lines);
  CHECK(old.exit_code() == exit_code::kGpu);  // rank 1 counts as silent
  bool named = false;
  for (const std::string& l : lines)
    named = named || l.find(fmt::format("its GPU stage result is unreadable: protocol version "
                                        "1 (this rankcheck speaks {})",
                                        kProtocolVersion)) != std::string::npos;
  CHECK(named);
}
