// `rankcheck env`: this process's identity, every source, notes, problems and the
// checks it can make alone, as text and JSON.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "base/version.h"
#include "identity/identity.h"
#include "report/common.h"
#include "report/report.h"

namespace rankcheck {
namespace {

// The source that gave a field its value, as resolve() chose it.
std::string source_of(const Identity& id, Field f) {
  const Observation* o = id.source(f);
  if (o == nullptr) return "";
  for (const Launcher& l : launchers()) {
    if (l.name == o->launcher) return fmt::format("{} ({})", o->variable, l.description);
  }
  return o->variable;
}

// Rows of columns, two spaces between: each column as wide as its widest value up
// to `cap`; a longer value keeps its line, and what follows it starts on the next,
// under its column. No line ends in spaces.
using Row = std::vector<std::string>;
std::string aligned(const std::vector<Row>& rows, size_t indent, size_t cap) {
  std::vector<size_t> width;
  for (const Row& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (size_t c = 0; c + 1 < r.size(); ++c)
      width[c] = std::max(width[c], std::min(cap, display_width(r[c])));
  }
  std::string out;
  for (const Row& r : rows) {
    std::string line(indent, ' ');
    size_t at = indent;  // the column the next cell starts at
    size_t last = r.size();
    while (last > 0 && r[last - 1].empty())
      --last;
    for (size_t c = 0; c < last; ++c) {
      if (c > 0 && display_width(line) + 2 > at) {  // the previous cell ran past
        while (!line.empty() && line.back() == ' ')
          line.pop_back();
        out += line + "\n";
        line.assign(at, ' ');
      }
      line.append(at - display_width(line), ' ');
      line += r[c];
      at += (c < width.size() ? width[c] : 0) + 2;
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string of(long v, long total) {
  if (v < 0) return "-";
  return total > 0 ? fmt::format("{} of {}", v, total) : std::to_string(v);
}

}  // namespace

std::string render_env_text(const Identity& id, const Record& self,
                            const std::vector<Finding>& local, RenderStyle style) {
  Paint paint{style.color};
  std::string out =
      fmt::format("rankcheck {} · identity of this process (no network)\n\n", kRankcheckVersion);
  std::vector<Row> rows;
  auto row = [&rows](std::string_view name, const std::string& value, const std::string& src) {
    rows.push_back({std::string(name), value, src});
  };
  std::string rank =
      id.rank < 0 && !id.source(Field::kRank) ? "-"
      : id.node_mode() ? fmt::format("{}-{} of {}", id.rank, id.rank + id.nranks - 1, id.world_size)
                       : of(id.rank, id.world_size);
  row("rank", rank, source_of(id, Field::kRank));
  row("world size", id.world_size < 0 ? "-" : std::to_string(id.world_size),
      source_of(id, Field::kWorldSize));
  row("local rank", of(id.local_rank, id.local_world_size), source_of(id, Field::kLocalRank));
  row("node", of(id.node_rank, id.nnodes), source_of(id, Field::kNodeRank));
  std::string resolved =
      self.master_resolved.empty()
          ? (self.resolve_error.empty() ? std::string()
                                        : " (" + printable(self.resolve_error) + ")")
          : " -> " + format_list(self.master_resolved.get(), 4);
  row("master",
      fmt::format("{}:{}", printable(id.master_addr.empty() ? "?" : id.master_addr),
                  id.master_port),
      source_of(id, Field::kMasterAddr) + resolved);
  row("job", id.job_id.empty() ? "-" : printable(id.job_id, 24), source_of(id, Field::kJobId));
  row("host", fmt::format("{} (pid {})", printable(self.host, 40), self.pid),
      self.interfaces.empty() ? "" : "interfaces: " + format_list(self.interfaces.get(), 8));
  row("machine", self.arch.empty() ? "-" : printable(self.arch, 32), "uname(2)");
  row("launchers", id.launchers.empty() ? "none" : format_list(id.launchers, 8),
      id.launcher.empty() ? "" : fmt::format("rank from {}", id.launcher));
  const GpuFacts& g = self.gpu;
  if (g.state == GpuState::kSkipped) {
    row("gpu", "not probed", "--no-gpu");
  } else if (!g.usable()) {
    row("gpu", "none usable", printable(g.error, 120));
  } else {
    for (const GpuDevice& d : g.devices) {
      row(g.devices.size() == 1 ? "gpu" : fmt::format("gpu (rank {})", d.rank),
          fmt::format("{} {}", d.ordinal, short_gpu_name(d.name)),
          fmt::format("{} {} · {}", printable(d.uuid, 48), printable(d.pci_bus_id, 20), g.choice));
      if (!g.nvml_error.empty()) continue;
      std::string fabric(fabric_state_text(d.fabric_state));
      if (d.fabric_state == GpuDevice::kFabricCompleted && d.fabric_status != 0)
        fabric += fmt::format(" with NVML error {}", d.fabric_status);
      row("nvlink", d.nvlinks < 0 ? std::string("none") : fmt::format("{} active", d.nvlinks),
          fmt::format("fabric {} · NVML", fabric));
    }
    if (!g.nvml_error.empty()) row("nvlink", "not read", printable(g.nvml_error, 120));
    row("driver", g.driver.empty() ? "-" : printable(g.driver, 24),
        fmt::format("CUDA {}", cuda_version_text(g.cuda_version)));
  }
  if (g.state != GpuState::kSkipped && g.device_count >= 0) {
    row("gpus", fmt::format("{} shown", g.device_count),
        g.granted < 0 ? std::string("no launcher or container variable gives a count")
                      : fmt::format("{} given: {}", g.granted, printable(g.granted_by, 80)));
  }
  if (g.state != GpuState::kSkipped) {
    row("nccl", g.nccl_loaded() ? nccl_version_text(g.nccl_version) : "not loaded",
        g.nccl_loaded() ? printable(g.nccl_path, 120) : printable(g.nccl_error, 120));
  }

  if (const NcclIfFacts& f = self.nccl_if; f.known()) {
    std::string how = printable(f.rule, 80);
    how += f.rules_version == 0
               ? " · the newest NCCL's rules"
               : fmt::format(" · NCCL {}'s rules", nccl_version_text(f.rules_version));
    if (f.state == NcclIfFacts::kNone)
      how += fmt::format(" · NCCL: \"{}\"", printable(f.error, 80));
    row("nccl if", printable(f.text(), 40), how);
    if (f.socket.size() > 1)
      row("nccl socket", format_list(f.socket.get(), 4), "NET/Socket transport");
  }
  nccl_net_env_rows(self, row);
  pcie_env_rows(self, row);

  out += aligned(rows, 2, 32);

  out += "\n  sources, highest precedence first\n";
  if (id.observations.empty()) out += "    none\n";
  std::vector<Row> sources;
  for (const Observation& o : id.observations) {
    sources.push_back({fmt::format("{}={}", printable(o.variable, 40), printable(o.value, 40)),
                       std::string(field_name(o.field)), o.launcher});
  }
  out += aligned(sources, 4, 40);
  if (!self.env.empty()) {
    out += "\n  variables compared across ranks\n";
    for (const EnvVar& e : self.env) {
      std::string from;  // a value from one of NCCL's configuration files says which
      for (const EnvVar& src : self.env_sources) {
        if (src.name == e.name) from = "   (" + printable(src.value, 80) + ")";
      }
      out += fmt::format("    {}={}{}\n", printable(e.name, 60), printable(e.value, 80), from);
    }
  }
  if (!id.notes.empty()) {
    out += "\n  notes\n";
    for (const auto& n : id.notes)
      out += "    - " + wrap(n, 6, 6) + "\n";
  }
  if (!id.problems.empty()) {
    out += "\n  problems (a usage error: rankcheck run would stop with exit 2)\n";
    for (const auto& p : id.problems)
      out += "    " + paint("31", "✗") + " " + wrap(p, 6, 6) + "\n";
  }
  out += "\n  local checks\n";
  if (!id.problems.empty()) {
    out += "    not run: fix the problems above first\n";
  } else if (local.empty()) {
    out += "    " + paint("32", "✓") + " nothing wrong that this process can see alone\n";
  }
  for (const Finding& f : local)
    out += render_finding(f, {.margin = 4, .wrap_indent = 6, .fix_at = 6}, style);
  return out;
}

std::string render_env_json(const Identity& id, const Record& self,
                            const std::vector<Finding>& local) {
  nlohmann::json j = json_envelope("env");
  j["usable"] = id.usable();
  j["self"] = record_json(self);
  j["launchers"] = id.launchers;
  j["sources"] = nlohmann::json::array();
  for (const Observation& o : id.observations) {
    j["sources"].push_back({{"field", field_name(o.field)},
                            {"launcher", o.launcher},
                            {"variable", o.variable},
                            {"value", o.value}});
  }
  j["conflicts"] = nlohmann::json::array();
  for (const Conflict& c : id.conflicts) {
    nlohmann::json values = nlohmann::json::array();
    for (const Observation& o : c.values)
      values.push_back({{o.variable, o.value}});
    j["conflicts"].push_back({{"field", field_name(c.field)}, {"values", values}});
  }
  j["notes"] = id.notes;
  j["problems"] = id.problems;
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : local)
    j["findings"].push_back(finding_json(f));
  return dump(j);
}

}  // namespace rankcheck
