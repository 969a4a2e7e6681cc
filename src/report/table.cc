// The report's table of members: one line a rank up to 8 members, one line a host
// (the first 48) above that.

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/text.h"
#include "report/common.h"
#include "report/report.h"

namespace rankcheck {
namespace {

std::string gpu_cell(const GpuFacts& g, const Record& rec) {
  if (!g.usable()) {
    return g.state == GpuState::kSkipped    ? "-"
           : g.state == GpuState::kNoDriver ? "no driver"
           : g.state == GpuState::kNoDevice ? "no GPU"
           : g.state == GpuState::kStuck    ? "stuck"
                                            : "unusable";
  }
  if (g.devices.empty()) return "-";
  if (rec.nranks > 1) {
    return fmt::format("{} × {}", g.devices.size(), short_gpu_name(g.devices.front().name));
  }
  const GpuDevice& d = g.devices.front();
  return fmt::format("{} {} {}", d.ordinal, short_gpu_name(d.name), printable(d.uuid, 12));
}

// The rows as aligned columns, two spaces in, three between.
std::string render_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], display_width(row[c]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(width[c] - display_width(row[c]) + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string member_table(const Report& r) {
  bool gpus = std::any_of(r.members.begin(), r.members.end(),
                          [](const Member& m) { return m.record.gpu.state != GpuState::kSkipped; });
  // The interface NCCL's rules pick on each host, once members say.
  bool nccl_ifs = std::any_of(r.members.begin(), r.members.end(),
                              [](const Member& m) { return m.record.nccl_if->known(); });
  // The network NCCL chose, once the stage's results say (NCCL_DEBUG=INFO's words).
  std::map<long, std::string> nets = nccl_net_by_rank(r);
  std::map<std::string, std::string> host_nets = nccl_networks(r);
  // The data network NCCL's rules pick on each host, once members say; beside it
  // what the stage's NCCL said it chose, when it said.
  bool predicted = std::any_of(r.members.begin(), r.members.end(),
                               [](const Member& m) { return m.record.nccl_net->known(); });
  bool net_column = predicted || !nets.empty();
  std::vector<std::vector<std::string>> rows;
  if (r.members.size() <= 8) {
    rows.push_back({"rank", "host", "local", "pid", "launcher"});
    if (gpus) rows.back().insert(rows.back().end(), {"gpu", "nccl"});
    if (nccl_ifs) rows.back().push_back("nccl if");
    if (net_column) rows.back().push_back("nccl net");
    rows.back().push_back("joined");
    std::vector<const Member*> sorted;
    for (const Member& m : r.members)
      sorted.push_back(&m);
    std::stable_sort(sorted.begin(), sorted.end(), [](const Member* a, const Member* b) {
      return a->record.rank < b->record.rank;
    });
    for (const Member* m : sorted) {
      const Record& rec = m->record;
      rows.push_back({rec.nranks == 1 ? std::to_string(rec.rank)
                                      : fmt::format("{}-{}", rec.rank, rec.last_rank()),
                      printable(rec.host, 40),
                      rec.local_rank < 0 ? "-"
                      : rec.nranks == 1
                          ? std::to_string(rec.local_rank)
                          : fmt::format("{}-{}", rec.local_rank, rec.local_rank + rec.nranks - 1),
                      std::to_string(rec.pid), printable(rec.launcher, 16)});
      if (gpus) {
        rows.back().push_back(gpu_cell(rec.gpu, rec));
        rows.back().push_back(rec.gpu.nccl_loaded() ? nccl_version_text(rec.gpu.nccl_version)
                                                    : "-");
      }
      if (nccl_ifs) rows.back().push_back(printable(rec.nccl_if->text(), 48));
      if (net_column) {
        auto it = nets.find(rec.rank);
        rows.back().push_back(nccl_net_cell(rec, it != nets.end() ? &it->second : nullptr));
      }
      rows.back().push_back(fmt::format("+{}", format_seconds(m->joined_ms)));
    }
  } else {
    // Large jobs: one line per host, ranks as ranges.
    struct HostRow {
      std::vector<long> ranks;
      long first_rank = 0;
      double last_join = 0;
      size_t members = 0;
      size_t gpus = 0;
      std::string gpu_name;
      std::set<std::string> nccl, driver, nccl_if, nccl_net;
    };
    std::map<std::string, HostRow> hosts;
    for (const Member& m : r.members) {
      HostRow& h = hosts[m.record.host];
      h.first_rank = h.ranks.empty() ? m.record.rank : std::min<long>(h.first_rank, m.record.rank);
      for (long k = m.record.rank; k <= m.record.last_rank(); ++k)
        h.ranks.push_back(k);
      h.last_join = std::max(h.last_join, m.joined_ms);
      ++h.members;
      const GpuFacts& g = m.record.gpu;
      h.gpus += g.devices.size();
      if (!g.devices.empty()) h.gpu_name = short_gpu_name(g.devices.front().name);
      h.nccl.insert(g.nccl_loaded() ? nccl_version_text(g.nccl_version) : "-");
      if (nccl_ifs) h.nccl_if.insert(printable(m.record.nccl_if->text(), 48));
      if (predicted) h.nccl_net.insert(printable(m.record.nccl_net->text(), 48));
      if (g.usable())
        h.driver.insert(g.driver.empty() ? "CUDA " + cuda_version_text(g.cuda_version)
                                         : printable(g.driver, 20));
    }
    // In order of their first rank, pointing into the map (12,500 hosts at 100k ranks).
    std::vector<const std::pair<const std::string, HostRow>*> sorted;
    sorted.reserve(hosts.size());
    for (const auto& entry : hosts)
      sorted.push_back(&entry);
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
      return a->second.first_rank < b->second.first_rank;
    });
    rows.push_back({"host", "ranks", "members"});
    if (gpus) rows.back().insert(rows.back().end(), {"gpus", "nccl", "driver"});
    if (nccl_ifs) rows.back().push_back("nccl if");
    if (predicted || !host_nets.empty()) rows.back().push_back("nccl net");
    rows.back().push_back("joined");
    size_t shown = 0;
    for (const auto* entry : sorted) {
      const auto& [host, h] = *entry;
      if (++shown > 48) {
        rows.push_back({fmt::format("... {} more hosts", sorted.size() - 48)});
        rows.back().resize(rows.front().size());
        break;
      }
      rows.push_back({printable(host, 40), format_ranks(h.ranks, 8), std::to_string(h.members)});
      if (gpus) {
        rows.back().push_back(h.gpus == 0 ? "-" : fmt::format("{} × {}", h.gpus, h.gpu_name));
        rows.back().push_back(format_list({h.nccl.begin(), h.nccl.end()}, 2));
        rows.back().push_back(
            h.driver.empty() ? "-" : format_list({h.driver.begin(), h.driver.end()}, 2));
      }
      if (nccl_ifs) rows.back().push_back(format_list({h.nccl_if.begin(), h.nccl_if.end()}, 2));
      if (predicted || !host_nets.empty()) {
        auto it = host_nets.find(host);
        std::string cell = predicted ? format_list({h.nccl_net.begin(), h.nccl_net.end()}, 2) : "-";
        if (it != host_nets.end())
          cell = predicted ? cell + " · NCCL: " + printable(it->second, 24)
                           : printable(it->second, 24);
        rows.back().push_back(cell);
      }
      rows.back().push_back(fmt::format("+{}", format_seconds(h.last_join)));
    }
  }
  return render_rows(rows);
}

}  // namespace rankcheck
