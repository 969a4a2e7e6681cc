// The catalogue's rows read from the programs' own sources: NCCL's WARN and INFO
// format strings at each tag, PyTorch's, Open MPI's help texts, Slurm's, CUDA's
// error names and strings, the launchers' and Kubernetes' words, kept as data in
// src/diagnose/data/*.tsv (each file says where its texts were read and how it is
// made again) and built into the binary. A row's template keeps the program's
// printf conversions; each one matches any text.
//
// Matching: an NCCL WARN line (`file.cc:LINE NCCL WARN text`) is matched against the
// templates of the file it names, and a WARN from a file with no matching template
// still says its subsystem (the file is the most stable field of all). Any other
// line meets the other rows through an index of their longest fixed piece.

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <unordered_map>

#include "diagnose/internal.h"

namespace rankcheck::diagnose {

std::string_view source_data();  // generated from src/diagnose/data/*.tsv

namespace {

using enum MessageClass;
using enum Role;
using F = FindingId;

// Where an NCCL WARN comes from when no template of its file matches: the
// subsystem its file belongs to, as a row of its own.
struct Subsystem {
  std::string_view stem;  ///< in the file's path (a name that outlived moves between folders)
  Pattern row;
};
constexpr Subsystem kNcclSubsystems[] = {
    {"net_ib",
     {"nccl_warn_ib", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/transport/net_ib*: the IB/RoCE transport"}},
    {"ibvwrap",
     {"nccl_warn_ibverbs", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/misc/ibvwrap.cc: libibverbs calls"}},
    {"net_socket",
     {"nccl_warn_net_socket", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/transport/net_socket.cc: the socket transport"}},
    {"socket",
     {"nccl_warn_socket", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/misc/socket.cc: sockets"}},
    {"os/",
     {"nccl_warn_os_socket", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/os/: sockets (2.29+)"}},
    {"plugin",
     {"nccl_warn_plugin", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/plugin/: network plugins"}},
    {"net.c",
     {"nccl_warn_net", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/net.cc: network plugins"}},
    {"coll_net",
     {"nccl_warn_collnet", "NCCL", kOwnError, kEither, F::kNcclNetworkError, "", "", "",
      "NCCL src/transport/coll_net.cc: CollNet/SHARP"}},
    {"shm",
     {"nccl_warn_shm", "NCCL", kOwnError, kInitiating, F::kSharedMemoryExhausted, "", "", "",
      "NCCL src/misc/shmutils.cc"}},
    {"cudawrap",
     {"nccl_warn_cuda", "NCCL", kOwnError, kInitiating, F::kCudaError, "", "", "",
      "NCCL src/misc/cudawrap.cc: the CUDA driver"}},
    {"alloc",
     {"nccl_warn_alloc", "NCCL", kOwnError, kInitiating, F::kGpuOutOfMemory, "", "", "",
      "NCCL src/include/alloc.h: allocations"}},
    {"bootstrap",
     {"nccl_warn_bootstrap", "NCCL", kOwnError, kEither, F::kNcclInitFailed, "", "", "",
      "NCCL src/bootstrap.cc: the bootstrap between ranks"}},
    {"proxy",
     {"nccl_warn_proxy", "NCCL", kPeerPointer, kDownstream, F::kPeerFailed, "", "", "",
      "NCCL src/proxy.cc: the proxy thread"}},
    {"",
     {"nccl_warn", "NCCL", kOwnError, kEither, F::kNcclInitFailed, "", "", "",
      "NCCL: a WARN of a file without a template"}},
};

MessageClass class_of(std::string_view c, size_t line) {
  if (c == "setup") return kSetup;
  if (c == "peers-absent") return kPeersAbsent;
  if (c == "process-died") return kProcessDied;
  if (c == "own-error" || c == "network" || c == "internal" || c == "desync") return kOwnError;
  if (c == "peer-pointer") return kPeerPointer;
  if (c == "collective-timeout") return kCollectiveTimeout;
  if (c == "killed-by-launcher") return kKilledByLauncher;
  if (c == "external-end") return kExternalEnd;
  if (c == "context") return kContext;
  throw std::invalid_argument("diagnose data, row " + std::to_string(line) + ": class '" +
                              std::string(c) + "'");
}

Role role_of(std::string_view r, size_t line) {
  if (r == "initiating") return kInitiating;
  if (r == "downstream") return kDownstream;
  if (r == "either" || r == "context") return kEither;
  throw std::invalid_argument("diagnose data, row " + std::to_string(line) + ": role '" +
                              std::string(r) + "'");
}

// The fixed pieces of a printf template: "Connect to %s failed : %s" ->
// {"Connect to ", " failed : ", ""}. "%%" is a fixed "%".
std::vector<std::string_view> pieces_of(std::string_view t, std::deque<std::string>& owned) {
  std::vector<std::string_view> out;
  std::string piece;
  bool copied = false;  // piece differs from the text (a "%%")
  size_t start = 0;
  auto close = [&](size_t end) {
    if (copied) {
      owned.push_back(piece);
      out.emplace_back(owned.back());
    } else {
      out.push_back(t.substr(start, end - start));
    }
    piece.clear();
    copied = false;
  };
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '%') {
      piece += t[i];
      continue;
    }
    if (i + 1 < t.size() && t[i + 1] == '%') {
      piece += '%';
      copied = true;
      ++i;
      continue;
    }
    close(i);
    // The conversion: flags, width, precision, length, then its letter.
    size_t j = i + 1;
    while (j < t.size() && std::strchr("-+ #0123456789.*hlLqjzt", t[j]) != nullptr)
      ++j;
    i = j;  // the letter (or the end)
    // Slurm's own %ps (a step id) and the kernel's %pI4: letters after a %p belong to it.
    if (i < t.size() && t[i] == 'p') {
      while (i + 1 < t.size() && std::isalnum(static_cast<unsigned char>(t[i + 1])))
        ++i;
    }
    start = i + 1;
  }
  close(t.size());
  return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t p = 0;
  for (;;) {
    size_t q = s.find(sep, p);
    out.push_back(s.substr(p, q == std::string_view::npos ? q : q - p));
    if (q == std::string_view::npos) return out;
    p = q + 1;
  }
}

struct Store {
  std::vector<SourceRow> rows;
  std::deque<std::string> owned;  // pieces with a "%%" made whole (a deque: they never move)
  Store() {
    std::string_view data = source_data();
    size_t line_no = 0;
    for (std::string_view line : split(data, '\n')) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || line.front() == '#') continue;
      auto cols = split(line, '\t');
      if (cols.size() != 7 && cols.size() != 8) {
        throw std::invalid_argument("diagnose data, row " + std::to_string(line_no) + ": " +
                                    std::to_string(cols.size()) + " columns, not 7 or 8");
      }
      SourceRow r;
      r.program = cols[0];
      r.versions = cols[1];
      r.source = cols[2];
      // "\n" in a template: the message goes on on the next line, and a row sees one
      // line: its longest. "\t" is a tab, "\\" a backslash.
      std::string_view raw = cols[6];
      if (raw.find("\\n") != std::string_view::npos) {
        std::string_view longest;
        for (size_t from = 0;;) {
          size_t nl = raw.find("\\n", from);
          std::string_view part = raw.substr(from, nl == std::string_view::npos ? nl : nl - from);
          if (part.size() > longest.size()) longest = part;
          if (nl == std::string_view::npos) break;
          from = nl + 2;
        }
        raw = longest;
      }
      if (raw.find('\\') != std::string_view::npos) {
        std::string t;
        for (size_t i = 0; i < raw.size(); ++i) {
          if (raw[i] == '\\' && i + 1 < raw.size() && (raw[i + 1] == 't' || raw[i + 1] == '\\')) {
            t += raw[i + 1] == 't' ? '\t' : '\\';
            ++i;
          } else {
            t += raw[i];
          }
        }
        owned.push_back(std::move(t));
        raw = owned.back();
      }
      r.text = raw;
      Pattern& p = r.pattern;
      p.name = cols[2];
      p.component = cols[0];
      p.cls = class_of(cols[3], line_no);
      p.role = role_of(cols[4], line_no);
      const FindingKind* k = cols[5] == "-" ? nullptr : find_finding_kind(cols[5]);
      if (cols[5] != "-" && k == nullptr) {
        throw std::invalid_argument("diagnose data, row " + std::to_string(line_no) +
                                    ": finding '" + std::string(cols[5]) + "'");
      }
      if (k == nullptr) p.cls = kContext;
      p.finding = k != nullptr ? k->id : F::kProcessDied;
      p.source = cols[2];
      r.pieces = pieces_of(r.text, owned);
      if (cols.size() == 8) {
        r.fields = parse_extracts(cols[7]);
        if (r.fields.size() + 1 != r.pieces.size()) {
          throw std::invalid_argument("diagnose data, row " + std::to_string(line_no) + ": " +
                                      std::to_string(r.fields.size()) + " fields for " +
                                      std::to_string(r.pieces.size() - 1) + " conversions");
        }
      }
      for (std::string_view piece : r.pieces) {
        if (piece.size() > p.literal.size()) p.literal = piece;
        r.weight += piece.size();
      }
      r.nccl_warn = r.program == "NCCL" && p.cls != kContext;
      rows.push_back(std::move(r));
    }
  }
};

const Store& store() {
  static const Store s;
  return s;
}

}  // namespace

std::span<const SourceRow> source_rows() {
  return store().rows;
}

std::span<const Pattern> nccl_subsystem_rows() {
  static const std::vector<Pattern> rows = [] {
    std::vector<Pattern> v;
    for (const Subsystem& s : kNcclSubsystems)
      v.push_back(s.row);
    return v;
  }();
  return rows;
}

size_t nccl_subsystem_of(std::string_view file, std::string_view text) {
  // The text first where it names its trouble outright: shared memory is shared
  // memory, whichever file reports it.
  if (text.find("shared memory") != std::string_view::npos ||
      text.find("/dev/shm") != std::string_view::npos) {
    file = "shm";
  } else if (text.rfind("NET/IB", 0) == 0) {
    file = "net_ib";  // the transports name themselves at the start of their texts
  } else if (text.rfind("NET/Socket", 0) == 0) {
    file = "net_socket";
  } else if (text.rfind("NET/", 0) == 0) {
    file = "plugin";
  } else if (text.rfind("Cuda failure", 0) == 0) {
    file = "cudawrap";
  }
  for (size_t i = 0; i + 1 < std::size(kNcclSubsystems); ++i) {
    if (file.find(kNcclSubsystems[i].stem) != std::string_view::npos) return i;
  }
  return std::size(kNcclSubsystems) - 1;
}

std::vector<std::string_view> template_values(const SourceRow& r, std::string_view text) {
  std::vector<std::string_view> out;
  size_t at = 0;  // where the text after the last piece found starts
  for (size_t i = 0; i < r.pieces.size(); ++i) {
    std::string_view piece = r.pieces[i];
    size_t found =
        piece.empty() ? (i + 1 == r.pieces.size() ? text.size() : at) : text.find(piece, at);
    if (found == std::string_view::npos) break;
    if (i > 0) out.push_back(text.substr(at, found - at));
    at = found + piece.size();
  }
  out.resize(r.pieces.empty() ? 0 : r.pieces.size() - 1);
  return out;
}

bool template_match(const SourceRow& r, std::string_view text) {
  if (r.weight == 0) return false;  // "%s" alone would match any line
  size_t at = 0;
  for (size_t i = 0; i < r.pieces.size(); ++i) {
    std::string_view piece = r.pieces[i];
    if (piece.empty()) continue;
    size_t found = text.find(piece, at);
    // An empty conversion between two spaces ("address %s with" of an empty address)
    // prints two, which a page or a chat that quoted the log made one.
    if (found == std::string_view::npos && at > 0 && piece.front() == ' ' && text[at - 1] == ' ' &&
        text.compare(at, piece.size() - 1, piece.substr(1)) == 0)
      found = at - 1;
    if (found == std::string_view::npos) return false;
    at = found + piece.size();
  }
  return true;
}

SourceIndex::SourceIndex(std::span<const SourceRow> rows) : rows_(rows) {
  filter4_.assign(kFilterBits / 64, 0);
  filter8_.assign(kFilterBits / 64, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SourceRow& r = rows[i];
    std::string_view key = r.pattern.literal;
    if (r.nccl_warn) {
      by_file_[r.source].push_back(static_cast<uint32_t>(i));
      all_warns_.push_back(static_cast<uint32_t>(i));
      // Met through its file's WARN lines; a long one also where it is quoted bare.
      if (r.weight < kQuotedWeight) continue;
    }
    if (key.size() < kMinKey || r.weight < kMinWeight) continue;  // too vague to find
    uint32_t four;
    std::memcpy(&four, key.data(), 4);
    set(filter4_, head_bit(four));
    if (key.size() >= 8) {
      uint64_t head;
      std::memcpy(&head, key.data(), 8);
      by_head_[head].push_back(static_cast<uint32_t>(i));
      uint64_t h = head * 0x9E3779B97F4A7C15ull;
      set(filter8_, static_cast<uint32_t>(h >> 48));
      set(filter8_, static_cast<uint32_t>(h >> 32) & 0xffff);
    } else {
      by_short_[four].push_back(static_cast<uint32_t>(i));
    }
  }
}

namespace {

// A program's own message beats the C library's words it quotes in a conversion
// ("ssh: Could not resolve hostname h: Temporary failure in name resolution" is ssh's,
// however long gai_strerror's text): the library's rows weigh less than any other.
size_t weight_of(const SourceRow& r) {
  return r.program == "C library" ? r.weight : r.weight + (size_t{1} << 20);
}

}  // namespace

void SourceIndex::match_here(std::string_view text, size_t i, std::optional<size_t>& best,
                             size_t& best_weight) const {
  auto consider = [&](const std::vector<uint32_t>& rows) {
    for (uint32_t row : rows) {
      const SourceRow& r = rows_[row];
      std::string_view key = r.pattern.literal;
      if (text.compare(i, key.size(), key) != 0) continue;
      size_t w = weight_of(r);
      if (w > best_weight && template_match(r, text)) {
        best = row;
        best_weight = w;
      }
    }
  };
  if (i + 8 <= text.size()) {
    uint64_t head;
    std::memcpy(&head, text.data() + i, 8);
    if (long_filtered(head)) {
      if (auto it = by_head_.find(head); it != by_head_.end()) consider(it->second);
    }
  }
  if (!by_short_.empty()) {
    uint32_t four;
    std::memcpy(&four, text.data() + i, 4);
    if (auto it = by_short_.find(four); it != by_short_.end()) consider(it->second);
  }
}

std::optional<size_t> SourceIndex::match(std::string_view text) const {
  std::optional<size_t> best;
  size_t best_weight = 0;
  for (size_t i = 0; i + kMinKey <= text.size(); ++i) {
    uint32_t four;
    std::memcpy(&four, text.data() + i, 4);
    if (has(filter4_, head_bit(four))) match_here(text, i, best, best_weight);  // most stop
  }
  return best;
}

std::optional<size_t> SourceIndex::match_at(std::string_view text,
                                            std::span<const uint32_t> at) const {
  std::optional<size_t> best;
  size_t best_weight = 0;
  for (uint32_t i : at)
    match_here(text, i, best, best_weight);
  return best;
}

// How much of a template `text` holds from its start: the fixed text of the pieces
// that occur in order, until the first that does not (a newer NCCL appends fields,
// an older one lacks the last).
size_t prefix_weight(const SourceRow& r, std::string_view text) {
  size_t at = 0, n = 0;
  for (std::string_view piece : r.pieces) {
    if (piece.empty()) continue;
    size_t found = text.find(piece, at);
    if (found == std::string_view::npos) break;
    at = found + piece.size();
    n += piece.size();
  }
  return n;
}

std::optional<size_t> SourceIndex::best_of(const std::vector<uint32_t>& candidates,
                                           std::string_view text) const {
  std::optional<size_t> best;
  size_t best_weight = 0;
  for (uint32_t row : candidates) {
    const SourceRow& r = rows_[row];
    if ((!best || weight_of(r) > best_weight) && template_match(r, text)) {
      best = row;
      best_weight = weight_of(r);
    }
  }
  if (best) return best;
  best_weight = 0;
  // No template whole: the one whose start the text holds most of, when that is
  // most of the template and long enough not to be chance.
  for (uint32_t row : candidates) {
    const SourceRow& r = rows_[row];
    size_t w = prefix_weight(r, text);
    if (w >= kMinPrefix && 2 * w >= r.weight && w > best_weight) {
      best = row;
      best_weight = w;
    }
  }
  return best;
}

std::optional<size_t> SourceIndex::match_warn(std::string_view file, std::string_view text) const {
  auto it = by_file_.find(file);
  if (it == by_file_.end()) {
    // Built from another folder: the same file by its name.
    size_t slash = file.rfind('/');
    std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
    for (auto f = by_file_.begin(); f != by_file_.end() && it == by_file_.end(); ++f) {
      std::string_view name = f->first;
      if (name.size() >= base.size() && name.substr(name.size() - base.size()) == base &&
          (name.size() == base.size() || name[name.size() - base.size() - 1] == '/'))
        it = f;
    }
  }
  if (it != by_file_.end()) {
    if (auto row = best_of(it->second, text)) return row;
  }
  // A file this catalogue's tags do not have (an older or newer NCCL moved the text):
  // the wording, which outlives the file, against every WARN of every file.
  return best_of(all_warns_, text);
}

WindowPass::WindowPass(const Prefilter& hand, const SourceIndex& keys)
    : hand_(hand), keys_(keys), any4_(hand.heads4()) {
  for (size_t i = 0; i < any4_.size(); ++i)
    any4_[i] |= keys.heads()[i];
}

bool WindowPass::run(std::string_view s, std::vector<uint32_t>& key_at) const {
  key_at.clear();
  bool may = hand_.always();
  const std::vector<uint64_t>& h4 = hand_.heads4();
  const std::vector<uint64_t>& h3 = hand_.heads3();
  const std::vector<uint64_t>& keys = keys_.heads();
  bool any3 = hand_.any3();
  constexpr uint32_t kFirst3 =
      std::endian::native == std::endian::little ? 0x00ffffffu : 0xffffff00u;
  for (size_t i = 0; i + 4 <= s.size(); ++i) {
    uint32_t w;
    std::memcpy(&w, s.data() + i, 4);
    uint32_t b = window_bit(w);
    if (has_bit(any4_, b)) {
      may = may || has_bit(h4, b);
      if (has_bit(keys, b)) key_at.push_back(static_cast<uint32_t>(i));
    }
    if (any3 && !may && hand_.starts3(static_cast<unsigned char>(s[i])) &&
        has_bit(h3, window_bit(w & kFirst3)))
      may = true;
  }
  if (any3 && !may && s.size() >= 3) {  // the last window of three bytes
    uint32_t w = 0;
    std::memcpy(&w, s.data() + s.size() - 3, 3);
    may = has_bit(h3, window_bit(w));
  }
  return may;
}

}  // namespace rankcheck::diagnose
