#include "host/sysfs_ib.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/resource.h>
#include <unistd.h>

#include "host/sysfs_read.h"

namespace rankcheck {
namespace {

namespace fs = std::filesystem;

int leading_number(const std::optional<std::string>& s) {
  return s ? std::atoi(s->c_str()) : 0;
}

// "fe80:0000:0000:0000:0e42:a1ff:fe5d:b4a2", as sysfs writes a GID.
std::array<uint8_t, 16> parse_gid(const std::string& text) {
  std::array<uint8_t, 16> raw{};
  in6_addr a{};
  if (::inet_pton(AF_INET6, text.c_str(), &a) == 1)
    std::copy(a.s6_addr, a.s6_addr + 16, raw.begin());
  return raw;
}

IbPortView read_port(const std::string& dir, int port) {
  IbPortView p;
  p.port = port;
  p.state = leading_number(read_line(dir + "/state"));
  p.phys_state = leading_number(read_line(dir + "/phys_state"));
  p.link_layer = read_line(dir + "/link_layer").value_or("");
  p.rate_gbps = static_cast<uint32_t>(std::max(0, leading_number(read_line(dir + "/rate"))));
  std::vector<int> indexes;
  for (const std::string& name : entries(dir + "/gids"))
    indexes.push_back(std::atoi(name.c_str()));
  std::sort(indexes.begin(), indexes.end());
  for (int i : indexes) {
    IbGid g;
    g.index = i;
    g.raw = parse_gid(read_line(dir + "/gids/" + std::to_string(i)).value_or(""));
    std::string type = read_line(dir + "/gid_attrs/types/" + std::to_string(i)).value_or("");
    g.roce = type.starts_with("RoCE v2")                                     ? 2
             : type.starts_with("IB/RoCE v1") || type.starts_with("RoCE v1") ? 1
                                                                             : 0;
    g.ndev = read_line(dir + "/gid_attrs/ndevs/" + std::to_string(i)).value_or("");
    p.gids.push_back(std::move(g));
  }
  return p;
}

// CAP_IPC_LOCK (14) in this process's effective set: /proc/self/status CapEff.
bool has_ipc_lock() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return false;
  char line[256];
  bool cap = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "CapEff:", 7) != 0) continue;
    unsigned long long eff = std::strtoull(line + 7, nullptr, 16);
    cap = ((eff >> 14) & 1) != 0;
    break;
  }
  std::fclose(f);
  return cap;
}

// The uverbs character device of RDMA device `name`, as rdma-core finds it
// (libibverbs/ibdev_nl.c find_uverbs_sysfs, init.c setup_sysfs_dev): the entry of
// <dev>/device/infiniband_verbs/, else the /sys/class/infiniband_verbs/uverbsN whose
// `ibdev` names it (`by_ibdev`, that class read once, on the first device that needs
// it). "" when sysfs names none.
std::string uverbs_of(const SysFs& sys, const std::string& name,
                      std::optional<std::map<std::string, std::string>>& by_ibdev) {
  for (const std::string& e :
       entries(sys.path("/sys/class/infiniband/" + name + "/device/infiniband_verbs"))) {
    if (e.starts_with("uverbs")) return e;
  }
  if (!by_ibdev) {
    by_ibdev.emplace();
    const std::string cls = sys.path("/sys/class/infiniband_verbs");
    for (const std::string& e : entries(cls)) {
      std::optional<std::string> ibdev = read_line(cls + "/" + e + "/ibdev");
      if (e.starts_with("uverbs") && ibdev) by_ibdev->emplace(*ibdev, e);
    }
  }
  auto it = by_ibdev->find(name);
  return it == by_ibdev->end() ? std::string() : it->second;
}

int64_t memlock_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return -2;
  return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(rl.rlim_cur);
}

// The folders /etc/ld.so.conf names, following its "include" globs one level down.
std::vector<std::string> ld_so_conf_dirs(const SysFs& sys, const std::string& file, int depth) {
  std::vector<std::string> out;
  std::FILE* f = std::fopen(sys.path(file).c_str(), "re");
  if (f == nullptr) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    std::string s(line);
    if (size_t hash = s.find('#'); hash != std::string::npos) s.resize(hash);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
      s.pop_back();
    size_t start = s.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    s = s.substr(start);
    if (s.starts_with("include") && depth < 2) {
      std::string pattern = s.substr(s.find_first_not_of(" \t", 7));
      if (!pattern.starts_with("/")) pattern = "/etc/" + pattern;
      glob_t g{};
      if (::glob(sys.path(pattern).c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) {
          std::string inc = std::string(g.gl_pathv[i]).substr(sys.root.size());
          for (std::string& d : ld_so_conf_dirs(sys, inc, depth + 1))
            out.push_back(std::move(d));
        }
      }
      ::globfree(&g);
    } else if (s.starts_with("/")) {
      out.push_back(s);
    }
  }
  std::fclose(f);
  return out;
}

}  // namespace

std::string SysFs::path(std::string_view abs) const {
  return root + std::string(abs);
}

IbHostView SysFs::read_ib() const {
  IbHostView v;
  v.root = root;
  const std::string cls = path("/sys/class/infiniband");
  std::vector<std::string> names = entries(cls);
  std::sort(names.begin(), names.end(), natural_less);
  std::optional<std::map<std::string, std::string>> uverbs_by_ibdev;
  for (const std::string& name : names) {
    IbDeviceView d;
    d.name = name;
    std::error_code ec;
    fs::path real = fs::canonical(cls + "/" + name + "/device", ec);
    if (!ec) d.pci_path = real.string().substr(std::min(root.size(), real.string().size()));
    d.sys_image_guid = read_line(cls + "/" + name + "/sys_image_guid").value_or("");
    std::vector<int> ports;
    for (const std::string& p : entries(cls + "/" + name + "/ports"))
      ports.push_back(std::atoi(p.c_str()));
    std::sort(ports.begin(), ports.end());
    for (int p : ports)
      d.ports.push_back(read_port(cls + "/" + name + "/ports/" + std::to_string(p), p));
    d.uverbs = uverbs_of(*this, name, uverbs_by_ibdev);
    if (!d.uverbs.empty()) {
      // libibverbs stat()s the device's own node, and NCCL's ibv_open_device opens it.
      std::string node = path("/dev/infiniband/" + d.uverbs);
      d.cdev = exists(node);
      int fd = d.cdev ? ::open(node.c_str(), O_RDWR | O_CLOEXEC) : -1;
      d.openable = fd >= 0;
      if (fd >= 0) ::close(fd);
    }
    v.devices.push_back(std::move(d));
  }
  for (const std::string& name : entries(path("/dev/infiniband"))) {
    if (!name.starts_with("uverbs")) continue;
    v.uverbs.push_back(name);
    // What ibv_open_device does first: a container without the device mapped, or
    // without permission, fails here, and NCCL skips the device.
    int fd = ::open(path("/dev/infiniband/" + name).c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      v.uverbs_openable = true;
      ::close(fd);
    }
  }
  // NCCL 2.28 tests /sys/module/nvidia_peermem/version; earlier ones the
  // memory_peers files, which nv_peer_mem and nvidia-peermem create.
  v.peermem = exists(path("/sys/module/nvidia_peermem/version")) ||
              exists(path("/sys/kernel/mm/memory_peers/nv_mem/version")) ||
              exists(path("/sys/kernel/mm/memory_peers/nv_mem_nc/version")) ||
              exists(path("/sys/kernel/mm/memory_peers/nvidia-peermem/version"));
  v.container = exists(path("/.dockerenv")) || exists(path("/run/.containerenv"));
  v.memlock = memlock_limit();
  v.ipc_lock = has_ipc_lock();
  return v;
}

IbCounters SysFs::read_ib_counters() const {
  IbCounters out;
  const std::string cls = path("/sys/class/infiniband");
  for (const std::string& name : entries(cls)) {
    for (const std::string& p : entries(cls + "/" + name + "/ports")) {
      std::array<int64_t, 4> values{};
      for (size_t i = 0; i < kIbErrorCounters.size(); ++i) {
        auto line =
            read_line(fmt::format("{}/{}/ports/{}/counters/{}", cls, name, p, kIbErrorCounters[i]));
        char* end = nullptr;
        long long v = line ? std::strtoll(line->c_str(), &end, 10) : -1;
        values[i] = line && end != line->c_str() && v >= 0 ? v : -1;
      }
      out[fmt::format("{}:{}", name, std::atoi(p.c_str()))] = values;
    }
  }
  return out;
}

const std::vector<std::string>& SysFs::loader_dirs() const {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>, std::less<>> by_root;
  std::lock_guard lock(mu);
  auto it = by_root.find(root);
  if (it == by_root.end())
    it = by_root.emplace(root, ld_so_conf_dirs(*this, "/etc/ld.so.conf", 0)).first;
  return it->second;  // a map's elements stay where they are
}

std::optional<std::string> SysFs::find_library(const std::string& name,
                                               const std::string& ld_library_path) const {
  if (name.find('/') != std::string::npos) {
    return exists(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::vector<std::string> dirs;
  for (size_t start = 0; start <= ld_library_path.size();) {
    size_t colon = ld_library_path.find(':', start);
    if (colon == std::string::npos) colon = ld_library_path.size();
    if (colon > start) dirs.push_back(ld_library_path.substr(start, colon - start));
    start = colon + 1;
  }
  size_t given = dirs.size();
  for (const std::string& d : loader_dirs())
    dirs.push_back(d);
  for (const char* d :
       {"/lib64", "/usr/lib64", "/lib", "/usr/lib", "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"})
    dirs.emplace_back(d);
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::string candidate = (i < given ? dirs[i] : path(dirs[i])) + "/" + name;
    if (exists(candidate)) return candidate;
  }
  return std::nullopt;
}

SysFs sysfs_from_env(const EnvMap& env) {
  SysFs s;
  if (const std::string* root = env_get(env, "RANKCHECK_SYSFS_ROOT"); root && !root->empty()) {
    s.root = *root;
    while (s.root.size() > 1 && s.root.back() == '/')
      s.root.pop_back();
  }
  return s;
}

}  // namespace rankcheck
