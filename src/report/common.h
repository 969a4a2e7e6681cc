#pragma once
// What the text and JSON renderers share: colour, wrapping, the JSON envelope,
// the JSON of a record and a finding. Private to the report layer (report.cc,
// env.cc, table.cc) and the diagnosis's renderer (diagnose/render.cc).

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/finding.h"
#include "model/record.h"
#include "report/report.h"

namespace rankcheck {

/// ANSI colour, when on.
struct Paint {
  bool on;
  std::string operator()(std::string_view code, std::string_view s) const {
    return on ? fmt::format("\x1b[{}m{}\x1b[0m", code, s) : std::string(s);
  }
};

/// Word-wraps `text` to the report's width, every line after the first indented by `indent`.
std::string wrap(std::string_view text, size_t first_col, size_t indent);
/// "H100" from "NVIDIA H100 80GB HBM3": the model, short enough for a table.
std::string short_gpu_name(const std::string& name);
/// The keys every JSON document starts with: schema_version, rankcheck_version and
/// its role ("master", "member", "env", "diagnose").
nlohmann::json json_envelope(std::string_view role);
/// The same, and the verdict and exit code of a document that has them.
nlohmann::json json_envelope(std::string_view role, std::string_view verdict, int exit_code);
nlohmann::json finding_json(const Finding& f);
nlohmann::json record_json(const Record& r);
/// The interface NCCL's rules pick: state, name, address, rule, the socket list.
nlohmann::json nccl_if_json(const NcclIfFacts& f);
/// The network NCCL chose ("IB", "Socket", a plugin's name) for each rank that said,
/// from the stage's results; empty when none did.
std::map<long, std::string> nccl_net_by_rank(const Report& r);
/// The same by host (a host whose ranks chose differently: "IB,Socket").
std::map<std::string, std::string> nccl_networks(const Report& r);
/// NCCL's data network (nccl_net.cc): its JSON, the member table's cell (with what
/// the stage's NCCL said, when it did), and `rankcheck env`'s rows.
nlohmann::json nccl_net_json(const NcclNetFacts& f);
std::string nccl_net_cell(const Record& r, const std::string* stage_net);
using EnvRowFn = std::function<void(std::string_view, const std::string&, const std::string&)>;
void nccl_net_env_rows(const Record& self, const EnvRowFn& row);
/// /dev/shm for NCCL's SHM transport: null when it could not be read.
nlohmann::json shm_json(const ShmFacts& f);
/// The PCIe under NCCL (pcie.cc): `rankcheck env`'s rows, and the JSON (null when
/// nothing was collected).
void pcie_env_rows(const Record& self, const EnvRowFn& row);
nlohmann::json pcie_json(const PcieFacts& f);
/// The text report's table of members (table.cc).
std::string member_table(const Report& r);
/// Appends `text` with `indent` after each of its line breaks: a JSON text nested
/// one level deeper. Line breaks only occur between tokens (strings escape theirs).
void append_indented(std::string& out, std::string_view text, std::string_view indent);
/// The document as text, indented, with a final newline unless asked not to.
std::string dump(const nlohmann::json& j, bool final_newline = true);

}  // namespace rankcheck
