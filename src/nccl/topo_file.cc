#include "nccl/topo_file.h"

#include <cstdlib>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "base/text.h"
#include "nccl/version.h"

namespace rankcheck::nccl {
namespace {

constexpr size_t kMaxStr = 255;     // MAX_STR_LEN
constexpr int kTopoXmlVersion = 1;  // NCCL_TOPO_XML_VERSION
constexpr int kMaxDepth = 64;

std::string shown(char c) {
  if (c == '\t') return "'\\t' (a tab: NCCL reads only spaces and newlines between elements)";
  if (c == '\n') return "'\\n' (NCCL reads a tag's attributes on one line)";
  if (c == '\r') return "'\\r'";
  if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
    return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
  return fmt::format("'{}'", c);
}

enum class Kind { kNone, kOpen, kClose, kSingle };
struct Node {
  Kind kind = Kind::kNone;
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
};

// NCCL's reader over the file's text, a character at a time. The first failure is
// kept (with its line) and every read after it gives nothing, so that each step may
// go on and its caller looks at ok() once.
class Parser {
 public:
  Parser(std::string_view t, bool single_quotes) : t_(t), single_(single_quotes) {}

  bool ok() const { return error_.empty(); }
  std::string error() const { return fmt::format("line {}: {}", line_, error_); }

  // xmlLoadSub: the elements under `head` (none: the top), each closed by its name.
  void load(const Node* head, int depth) {
    if (head != nullptr && head->kind == Kind::kSingle) return;
    if (depth > kMaxDepth) return fail(fmt::format("elements nested more than {} deep", kMaxDepth));
    while (ok()) {
      Node n = node();
      if (!ok()) return;
      if (n.kind == Kind::kNone) {
        if (head != nullptr) fail("XML Parse : unterminated " + printable(head->name, 40));
        return;
      }
      if (n.kind == Kind::kClose) {
        if (head == nullptr)
          return fail("XML Parse : </" + printable(n.name, 40) + "> closes nothing");
        if (n.name != head->name)
          fail(fmt::format("XML Mismatch : {} / {}", printable(head->name, 40),
                           printable(n.name, 40)));
        return;
      }
      if (head == nullptr && n.name == "system") system_version(n);
      load(&n, depth + 1);
    }
  }

 private:
  void fail(std::string why) {
    if (ok()) error_ = std::move(why);
  }

  // xmlGetChar: EOF inside an element is an error.
  char next() {
    if (!ok()) return '\0';
    if (at_ >= t_.size()) {
      fail("XML Parse : Unexpected EOF");
      return '\0';
    }
    char c = t_[at_++];
    if (c == '\n') ++line_;
    return c;
  }

  // xmlGetValue: the value after '=' in its quotes, and the character after it.
  std::string value(char& last) {
    char quote = next();
    if (quote != '"' && !(single_ && quote == '\'')) {
      fail(single_ ? "XML Parse : Expected (double) quote."
                   : "XML Parse : Expected (double) quote. (before NCCL 2.27.3 a value takes "
                     "double quotes only)");
      return "";
    }
    std::string v;
    for (char c = next(); ok() && c != quote; c = next()) {
      v += c;
      if (v.size() >= kMaxStr) fail(fmt::format("Error : value too long (max {})", kMaxStr));
    }
    last = next();
    return v;
  }

  // xmlGetToken: a name up to ' ', '>', '/', '\n' or '\r' (which `last` gets), or up to
  // '=' and a value where `val` may take one.
  std::string token(std::string* val, char& last) {
    std::string name;
    while (ok()) {
      char c = next();
      if (c == '=') {
        if (val == nullptr) {
          fail("XML Parse : Unexpected value with name " + printable(name, 40));
          break;
        }
        *val = value(last);
        break;
      }
      if (c == ' ' || c == '>' || c == '/' || c == '\n' || c == '\r') {
        last = c;
        break;
      }
      name += c;
      if (name.size() >= kMaxStr) fail(fmt::format("Error : name too long (max {})", kMaxStr));
    }
    return name;
  }

  // xmlSkipComment: up to "-->", counting what the name already took.
  void skip_comment(const std::string& start, char after) {
    std::string end = "...";
    auto shift = [&end](char c) { end = end.substr(1) + c; };
    for (char c : start)
      shift(c);
    shift(after);
    while (end != "-->") {
      if (at_ >= t_.size()) return fail("XML Parse error : unterminated comment");
      shift(next());
    }
  }

  // xmlGetNode: the next element's tag; kNone at the end of the file.
  Node node() {
    Node n;
    char c = ' ';
    while (c == ' ' || c == '\n' || c == '\r') {
      if (at_ >= t_.size()) return n;
      c = next();
    }
    if (c != '<') {
      fail("XML Parse error : expecting '<', got " + shown(c));
      return n;
    }
    n.name = token(nullptr, c);
    if (n.name.starts_with("!--")) {
      skip_comment(n.name.substr(3), c);
      return ok() ? node() : n;
    }
    if (n.name.empty() && c == '/') {
      n.kind = Kind::kClose;
      n.name = token(nullptr, c);
      if (ok() && c != '>') {
        fail(fmt::format("XML Parse error : unexpected trailing {} in closing tag {}", shown(c),
                         printable(n.name, 40)));
      }
      return n;
    }
    n.kind = Kind::kOpen;
    while (ok() && c == ' ') {
      std::string v;
      std::string k = token(&v, c);
      n.attrs.emplace_back(std::move(k), std::move(v));
    }
    if (ok() && c == '/') {
      n.kind = Kind::kSingle;
      token(nullptr, c);
    }
    if (ok() && c != '>') fail("XML Parse : expected >, got " + shown(c));
    return n;
  }

  // ncclTopoXmlLoadSystem: its version attribute, read with strtol, must be 1.
  void system_version(const Node& n) {
    for (const auto& [k, v] : n.attrs) {
      if (k != "version") continue;
      long version = std::strtol(v.c_str(), nullptr, 0);
      if (version != kTopoXmlVersion)
        fail(fmt::format("XML Topology has wrong version {}, {} needed", version, kTopoXmlVersion));
      return;
    }
    fail("Attribute version of node system not found");
  }

  std::string_view t_;
  size_t at_ = 0;
  int line_ = 1;
  bool single_;
  std::string error_;
};

}  // namespace

std::string topo_file_error(std::string_view text, int32_t nccl_version) {
  Parser p(text, rules_since(nccl_version, kTopoSingleQuotes));
  p.load(nullptr, 0);
  return p.ok() ? "" : p.error();
}

}  // namespace rankcheck::nccl
