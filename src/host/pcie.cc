#include "host/pcie.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "base/text.h"
#include "host/sysfs_read.h"
#include "nccl/topo_file.h"

namespace rankcheck {
namespace {

namespace fs = std::filesystem;

constexpr size_t kExtCapStart = 0x100;
constexpr uint16_t kAcsCapId = 0x000d;

uint32_t le32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i)
    v |= uint32_t(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

// The whole config space as this process may read it (64 bytes without
// CAP_SYS_ADMIN, 256 or 4096 with it).
std::string read_config(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out(4096, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

// A PCI device as sysfs places it: its folder under the root, its parts, its NUMA node.
struct Located {
  std::string dir;  ///< the real folder, under the root
  std::vector<std::string> parts;
  int numa = -1;
};

std::optional<Located> locate(const SysFs& sys, const std::string& link) {
  std::error_code ec;
  fs::path real = fs::canonical(sys.path(link), ec);
  if (ec) return std::nullopt;
  Located d;
  d.dir = real.string();
  d.parts = pci_parts(d.dir.substr(std::min(sys.root.size(), d.dir.size())));
  if (d.parts.size() < 2) return std::nullopt;
  if (auto n = read_line(d.dir + "/numa_node")) d.numa = std::atoi(n->c_str());
  return d;
}

PcieLink read_link(const std::string& dir) {
  PcieLink l;
  l.speed = parse_link_speed(read_line(dir + "/current_link_speed").value_or(""));
  l.max_speed = parse_link_speed(read_line(dir + "/max_link_speed").value_or(""));
  auto width = [](const std::optional<std::string>& s) {
    int w = s ? std::atoi(s->c_str()) : 0;
    return static_cast<uint8_t>(std::clamp(w, 0, 32));
  };
  l.width = width(read_line(dir + "/current_link_width"));
  l.max_width = width(read_line(dir + "/max_link_width"));
  return l;
}

void read_iommu(const std::string& dir, PcieDevice& d) {
  if (!exists(dir + "/iommu_group")) {
    d.iommu = PcieDevice::kIommuNone;
    return;
  }
  std::string type = read_line(dir + "/iommu_group/type").value_or("");  // Linux 5.11+
  d.iommu_type = type;
  d.iommu = type == "identity"                  ? PcieDevice::kIommuIdentity
            : type == "DMA" || type == "DMA-FQ" ? PcieDevice::kIommuDma
                                                : PcieDevice::kIommuUnknown;
}

// The host's NVIDIA display and 3D controllers by bus id, as CUDA's PCI_BUS_ID order
// numbers them.
std::vector<std::string> host_gpus(const SysFs& sys) {
  std::vector<std::string> out;
  const std::string dir = sys.path("/sys/bus/pci/devices");
  for (const std::string& bdf : entries(dir)) {
    if (read_line(dir + "/" + bdf + "/vendor").value_or("") != "0x10de") continue;
    std::string cls = read_line(dir + "/" + bdf + "/class").value_or("");
    if (cls.starts_with("0x0302") || cls.starts_with("0x0300")) out.push_back(bdf);
  }
  return out;
}

// Why NCCL does not open an HCA's ports: the first port's reason.
std::string unused_why(const NcclNetFacts& net, const std::string& device) {
  for (const IbPortFacts& p : net.ports) {
    if (p.device != device) continue;
    if ((p.flags & IbPortFacts::kSelected) == 0) return "NCCL_IB_HCA leaves it out";
    if ((p.flags & IbPortFacts::kNoCdev) != 0) return "its /dev/infiniband node is missing";
    if (p.state != IbPortFacts::kActive) return "its port is not ACTIVE";
  }
  return "NCCL does not open it";
}

// The bridges above a device (its parts between the host bridge and itself).
// A bridge shared by several devices (a root port, a switch's upstream port) is read
// once: `redirect` holds every bridge read, with its register when it redirects.
void read_acs(const SysFs& sys, const Located& d,
              std::map<std::string, std::optional<AcsBridge>>& redirect, PcieFacts& f) {
  std::string dir = sys.path("/sys/devices/" + d.parts[0]);
  for (size_t i = 1; i + 1 < d.parts.size(); ++i) {
    dir += "/" + d.parts[i];
    auto [it, fresh] = redirect.try_emplace(d.parts[i]);
    if (!fresh) continue;
    AcsRead acs = acs_from_config(read_config(dir + "/config"));
    if (!acs.readable) f.flags |= PcieFacts::kAcsUnreadable;
    if (acs.ctl && acs_redirects(*acs.ctl)) it->second = AcsBridge{d.parts[i], *acs.ctl};
  }
}

// The kernel command line's words about the IOMMU and ACS.
std::string iommu_words(const SysFs& sys) {
  std::optional<std::string> text = read_file(sys.path("/proc/cmdline"), 4096);
  if (!text) return "";
  std::string_view line(*text);
  std::vector<std::string> words;
  while (!line.empty()) {
    size_t sp = line.find_first_of(" \t\n");
    std::string_view w = line.substr(0, sp);
    if (w.find("iommu") != std::string_view::npos || w.find("acs") != std::string_view::npos)
      words.emplace_back(w);
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  std::string out;
  for (const std::string& w : words)
    out += (out.empty() ? "" : " ") + w;
  return printable(out, 200);
}

}  // namespace

AcsRead acs_from_config(std::string_view config) {
  AcsRead r;
  if (config.size() <= kExtCapStart) return r;
  r.readable = true;
  size_t at = kExtCapStart;
  for (int hops = 0; hops < 64 && at + 8 <= config.size(); ++hops) {
    uint32_t header = le32(config, at);
    if (header == 0 || header == 0xffffffff) break;
    if ((header & 0xffff) == kAcsCapId) {
      r.ctl = static_cast<uint16_t>(le32(config, at + 4) >> 16);
      break;
    }
    size_t next = (header >> 20) & 0xffc;
    if (next < kExtCapStart) break;
    at = next;
  }
  return r;
}

std::string sysfs_bdf(std::string_view bus) {
  // [domain:]bus:device.function in hex, the domain 4 or 8 digits.
  std::vector<std::string_view> parts;
  while (true) {
    size_t colon = bus.find(':');
    parts.push_back(bus.substr(0, colon));
    if (colon == std::string_view::npos) break;
    bus.remove_prefix(colon + 1);
  }
  if (parts.size() == 2) parts.insert(parts.begin(), "0000");
  if (parts.size() != 3) return "";
  std::string_view domain = parts[0], b = parts[1], devfn = parts[2];
  if (domain.size() > 4) domain.remove_prefix(domain.size() - 4);
  auto hex = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isxdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  size_t dot = devfn.find('.');
  if (!hex(domain) || !hex(b) || b.size() > 2 || dot == std::string_view::npos ||
      !hex(devfn.substr(0, dot)) || !hex(devfn.substr(dot + 1)))
    return "";
  std::string out = fmt::format("{:0>4}:{:0>2}:{:0>2}.{}", domain, b, devfn.substr(0, dot),
                                devfn.substr(dot + 1));
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

PcieFacts read_pcie(const SysFs& sys, const GpuFacts& gpu, const NcclNetFacts& net) {
  PcieFacts f;
  // The HCAs of the host, opened by NCCL or not, in the order sysfs lists them.
  struct Hca {
    std::string name;
    bool used = false;
    std::optional<Located> at;
  };
  std::vector<Hca> hcas;
  for (const IbPortFacts& p : net.ports) {
    auto it =
        std::find_if(hcas.begin(), hcas.end(), [&](const Hca& h) { return h.name == p.device; });
    if (it == hcas.end()) {
      hcas.push_back({p.device.str(), false,
                      locate(sys, "/sys/class/infiniband/" + p.device.str() + "/device")});
      it = hcas.end() - 1;
    }
    if (p.used()) it->used = true;
  }
  std::map<std::string, std::optional<AcsBridge>> redirect;
  std::vector<std::string> gpus = host_gpus(sys);
  for (const GpuDevice& g : gpu.devices) {
    std::string bdf = sysfs_bdf(g.pci_bus_id);
    auto at = bdf.empty() ? std::nullopt : locate(sys, "/sys/bus/pci/devices/" + bdf);
    if (!at) continue;
    PcieDevice d;
    d.kind = PcieDevice::kGpu;
    d.bdf = bdf;
    d.rank = g.rank;
    auto place = std::find(gpus.begin(), gpus.end(), bdf);
    d.name = place == gpus.end() ? std::string("GPU") : fmt::format("GPU {}", place - gpus.begin());
    d.link = read_link(at->dir);
    read_iommu(at->dir, d);
    read_acs(sys, *at, redirect, f);
    PciPath used = PciPath::kUnknown, any = PciPath::kUnknown;
    std::string used_name, any_name;
    for (const Hca& h : hcas) {
      if (!h.at || net.transport != NcclNetFacts::kIb) continue;
      PciPath p = pci_path_between(at->parts, at->numa, h.at->parts, h.at->numa);
      if (p == PciPath::kUnknown) continue;
      if (h.used && (used == PciPath::kUnknown || p < used)) used = p, used_name = h.name;
      if (any == PciPath::kUnknown || p < any) any = p, any_name = h.name;
    }
    d.nic = used_name;
    d.nic_path = static_cast<uint8_t>(used);
    if (used != PciPath::kUnknown && any < used) {
      d.near_nic = any_name;
      d.near_path = static_cast<uint8_t>(any);
      d.near_why = unused_why(net, any_name);
    }
    f.devices.push_back(std::move(d));
  }
  for (const Hca& h : hcas) {
    if (!h.used || !h.at) continue;
    PcieDevice d;
    d.kind = PcieDevice::kHca;
    d.bdf = h.at->parts.back();
    d.name = h.name;
    d.link = read_link(h.at->dir);
    read_iommu(h.at->dir, d);
    read_acs(sys, *h.at, redirect, f);
    f.devices.push_back(std::move(d));
  }
  if (f.devices.empty()) return PcieFacts{};
  f.flags |= PcieFacts::kRead;
  for (auto& [bdf, b] : redirect) {
    if (b) f.acs.push_back(*b);
  }
  f.cmdline = iommu_words(sys);
  return f;
}

std::string topo_file_problem(const SysFs& sys, const EnvMap& env, int32_t nccl_version) {
  const std::string* file = env_get(env, "NCCL_TOPO_FILE");
  if (file == nullptr || file->empty()) return "";
  std::string path = file->starts_with('/') ? sys.path(*file) : *file;
  std::optional<std::string> text = read_file(path, 16u << 20);
  if (!text) {
    return fmt::format(
        "{} cannot be opened ({}): NCCL goes on without it and detects the "
        "topology itself, saying so only at NCCL_DEBUG=INFO (\"Could not open XML "
        "topology file\")",
        printable(*file, 120), std::strerror(errno));
  }
  std::string why = nccl::topo_file_error(*text, nccl_version);
  if (why.empty()) return "";
  return fmt::format("{}, {}: NCCL's init fails on it", printable(*file, 120), why);
}

}  // namespace rankcheck
