#include "host/sockets.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

namespace rankcheck {
namespace {

constexpr int kEstablished = 1;
constexpr int kSynSent = 2;
constexpr int kListen = 10;

// /proc/net/tcp prints each 32-bit word of an address in the host's byte order, as hex.
std::string address_of(std::string_view hex, bool v6) {
  size_t words = v6 ? 4 : 1;
  if (hex.size() != words * 8) return {};
  uint8_t bytes[16] = {};
  for (size_t w = 0; w < words; ++w) {
    uint32_t v =
        static_cast<uint32_t>(std::strtoul(std::string(hex.substr(w * 8, 8)).c_str(), nullptr, 16));
    std::memcpy(bytes + w * 4, &v, 4);
  }
  char out[INET6_ADDRSTRLEN] = {};
  if (::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, out, sizeof out) == nullptr) return {};
  return out;
}

bool split_endpoint(std::string_view s, bool v6, std::string& addr, uint16_t& port) {
  auto colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  addr = address_of(s.substr(0, colon), v6);
  port = static_cast<uint16_t>(std::strtoul(std::string(s.substr(colon + 1)).c_str(), nullptr, 16));
  return !addr.empty();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "::ffff:10.0.0.1" is 10.0.0.1 to whoever compares.
std::string unmapped(const std::string& a) {
  return a.rfind("::ffff:", 0) == 0 && a.find('.') != std::string::npos ? a.substr(7) : a;
}

// Every process below `root` (and root itself), from each process's parent in /proc.
std::set<pid_t> tree_of(const ProcFs& proc, pid_t root) {
  std::multimap<pid_t, pid_t> children;
  if (DIR* d = ::opendir(proc.root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      std::string stat = read_file(proc.root + "/" + e->d_name + "/stat");
      // "pid (comm) state ppid ...": the command may hold blanks and parentheses.
      auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 1));
      std::string state;
      long ppid = 0;
      if (rest >> state >> ppid)
        children.emplace(static_cast<pid_t>(ppid), static_cast<pid_t>(pid));
    }
    ::closedir(d);
  }
  std::set<pid_t> tree{root};
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      if (tree.insert(it->second).second) todo.push_back(it->second);
    }
  }
  return tree;
}

bool holds_inode(const ProcFs& proc, pid_t pid, const std::set<unsigned long>& inodes) {
  std::string dir = proc.root + "/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  char link[128];
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), link, sizeof link - 1);
    if (n <= 8) continue;
    link[n] = '\0';
    std::string_view l(link, static_cast<size_t>(n));
    if (l.rfind("socket:[", 0) != 0) continue;
    if (inodes.count(std::strtoul(link + 8, nullptr, 10)) != 0) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace

std::vector<TcpSocket> parse_proc_net_tcp(const std::string& text, bool v6) {
  std::vector<TcpSocket> out;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout;
    unsigned long inode = 0;
    if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode))
      continue;
    TcpSocket s;
    if (!split_endpoint(local, v6, s.local_addr, s.local_port)) continue;
    if (!split_endpoint(remote, v6, s.remote_addr, s.remote_port)) continue;
    s.state = static_cast<int>(std::strtol(state.c_str(), nullptr, 16));
    s.inode = inode;
    out.push_back(std::move(s));
  }
  return out;
}

bool tree_meets_endpoint(const ProcFs& proc, pid_t root, const std::vector<std::string>& addrs,
                         uint16_t port) {
  std::set<std::string> want;
  for (const std::string& a : addrs)
    want.insert(unmapped(a));
  std::set<unsigned long> inodes;
  for (bool v6 : {false, true}) {
    std::string path = proc.root + "/" + std::to_string(root) + (v6 ? "/net/tcp6" : "/net/tcp");
    for (const TcpSocket& s : parse_proc_net_tcp(read_file(path), v6)) {
      bool listens = s.state == kListen && s.local_port == port;
      bool meets = (s.state == kEstablished || s.state == kSynSent) && s.remote_port == port &&
                   (want.empty() || want.count(unmapped(s.remote_addr)) != 0);
      if ((listens || meets) && s.inode != 0) inodes.insert(s.inode);
    }
  }
  if (inodes.empty()) return false;
  for (pid_t p : tree_of(proc, root)) {
    if (holds_inode(proc, p, inodes)) return true;
  }
  return false;
}

}  // namespace rankcheck
