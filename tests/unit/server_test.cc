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

#include <rankcheck/server.h>

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
