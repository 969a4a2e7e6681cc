// The outside world of `rankcheck diagnose`: files, directories, stdin and gzip,
// read in fixed chunks and handed to the scanner a line at a time (a regular file read
// ahead on a second thread, ReadAhead). A line longer
// than kMaxLine is handed on as its start and its end, so memory stays bounded
// whatever the input holds.

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef RANKCHECK_HAVE_ZLIB
#include <zlib.h>
#endif

#include "base/text.h"
#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

constexpr size_t kChunk = 1 << 20;
constexpr size_t kMaxLine = 64 * 1024;

// The CPU time a run may take (--max-seconds): given, or by default this much and a
// second more for each kBytesPerSecond read, so that no input costs more than a
// slow read of it would. Past it, reading stops and what was read is diagnosed.
constexpr double kBaseSeconds = 30;
constexpr double kBytesPerSecond = 100e6;

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

struct CpuBudget {
  double given = -1;  // --max-seconds; < 0: the default; 0: none
  double start = cpu_seconds();
  uint64_t bytes = 0;
  bool spent = false;
  double limit() const {
    return given >= 0 ? given : kBaseSeconds + double(bytes) / kBytesPerSecond;
  }
  void charge(size_t n) {
    bytes += n;
    if (!spent && given != 0 && cpu_seconds() - start > limit()) spent = true;
  }
};
// The budget of the read_inputs call under way on this thread (none elsewhere: the
// live reader of run -- CMD feeds the scanner itself).
thread_local CpuBudget* t_budget = nullptr;

bool budget_spent() {
  return t_budget != nullptr && t_budget->spent;
}

// Splits chunks into lines; a line's text is handed on once its end is seen. A
// line longer than kMaxLine is handed on as its first and last kMaxLine / 2 bytes:
// the message that ends a long line (after a progress bar's carriage returns, a
// dump) is still read, in bounded memory.
class LineSplitter {
 public:
  explicit LineSplitter(Scanner& s) : sink_([&s](std::string_view l) { s.line(l); }) {}
  explicit LineSplitter(std::function<void(std::string_view)> sink) : sink_(std::move(sink)) {}

  void feed(std::string_view chunk) {
    if (t_budget != nullptr) t_budget->charge(chunk.size());
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      std::string_view part = chunk.substr(0, nl);
      if (partial_.empty() && nl != std::string_view::npos && part.size() <= kMaxLine) {
        sink_(part);  // the common case: no copy
      } else {
        add(part);
        if (nl != std::string_view::npos) flush();
      }
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
    }
  }
  void end() {
    if (!partial_.empty()) flush();
  }

 private:
  static constexpr size_t kKeep = kMaxLine / 2;

  void add(std::string_view part) {
    size_t room = partial_.size() < kMaxLine ? kMaxLine - partial_.size() : 0;
    partial_.append(part.substr(0, room));
    if (part.size() <= room) return;
    tail_.append(part.substr(room));
    cut_ = true;
    if (tail_.size() > 2 * kKeep) tail_.erase(0, tail_.size() - kKeep);
  }
  void flush() {
    if (!cut_) {
      sink_(partial_);
    } else {
      // Its start, then its last kKeep bytes (some of them from partial_'s end when
      // the tail is short).
      std::string whole = partial_.substr(0, kKeep);
      std::string last = partial_.substr(kKeep) + tail_;
      whole += " \xE2\x80\xA6 ";
      whole.append(last, last.size() > kKeep ? last.size() - kKeep : 0);
      sink_(whole);
    }
    partial_.clear();
    tail_.clear();
    cut_ = false;
  }

  std::function<void(std::string_view)> sink_;
  std::string partial_;  // the line's first kMaxLine bytes
  std::string tail_;     // what came after them, its last kKeep bytes at least
  bool cut_ = false;
};

// rankcheck's own JSON report (`--json`, a member's or the master's, or the watch's
// job report) read as its text report would be: each error finding a "✗ id  message"
// line with its "fix:" under it, the suspect hosts after. Larger than this, it is
// read as lines.
constexpr size_t kMaxReport = size_t{256} << 20;

bool report_lines(const std::string& text, LineSplitter& lines) {
  nlohmann::json r = nlohmann::json::parse(text, nullptr, false);
  if (r.is_discarded() || !r.is_object() || !r.contains("rankcheck_version") ||
      !r.contains("findings") || !r["findings"].is_array())
    return false;
  auto str = [](const nlohmann::json& o, const char* key) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string out;
  for (const nlohmann::json& f : r["findings"]) {
    if (!f.is_object() || str(f, "severity") == "warning" || str(f, "id").empty()) continue;
    // One line each: the report's own line breaks are not the finding's.
    auto flat = [](std::string v) {
      std::replace(v.begin(), v.end(), '\n', ' ');
      return v;
    };
    out += fmt::format("  \xE2\x9C\x97 {}  {}\n", flat(str(f, "id")), flat(str(f, "message")));
    std::string fix = str(f, "fix");
    if (fix.empty()) fix = str(f, "hint");  // the report's name for it
    if (!fix.empty()) out += "      fix: " + flat(fix) + "\n";
  }
  if (std::string hosts = str(r, "suspect_hosts"); !hosts.empty())
    out += "  suspect hosts: " + hosts + "\n";
  lines.feed(out);
  return true;
}

// A regular file read ahead: a second thread reads its chunks, splits them into lines
// and makes each line's LineAhead (Scanner::ahead: its prefixes, its windows, its
// literals), while this thread runs the scanner over the chunk before. Only a regular
// file: its reads never wait on a writer, so a stop (the CPU budget spent) is seen by
// the thread within a chunk's reading, and the thread is always joined.
class ReadAhead {
 public:
  struct Batch {
    std::string data;               // the chunk its lines point into (kChunk reserved)
    std::deque<std::string> owned;  // lines made whole across chunks, cut, or displayed
    std::vector<LineAhead> lines;
    std::vector<uint32_t> keys;  // the lines' source-key offsets (LineAhead::keys_from)
    size_t bytes = 0;            // read into it
    int error = 0;               // a read's errno
  };

  ReadAhead(int fd, const Scanner& scanner, std::string first)
      : fd_(fd),
        scanner_(scanner),
        thread_([this, f = std::move(first)]() mutable { run(std::move(f)); }) {}
  ~ReadAhead() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// The next batch, in order; none once the file is read.
  std::optional<Batch> next() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return !queue_.empty() || done_; });
    if (queue_.empty()) return std::nullopt;
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return b;
  }
  /// A batch read, for the thread to fill again (its buffers' memory reused).
  void recycle(Batch b) {
    std::lock_guard lock(m_);
    if (spare_.size() < kAhead) spare_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kAhead = 2;  // batches made and not yet taken, at most

  void run(std::string first) {
    Batch b;
    std::string scratch;
    LineSplitter lines([&](std::string_view l) {
      bool in_chunk = !b.data.empty() && l.data() >= b.data.data() &&
                      l.data() + l.size() <= b.data.data() + b.data.size();
      std::string_view v = in_chunk ? l : std::string_view(b.owned.emplace_back(l));
      scanner_.ahead(v, b.lines.emplace_back(), b.keys, b.owned, scratch);
    });
    // The lines point into `data` while the batch moves between threads: a buffer of
    // its own on the heap, never a short string's inline one, which a move copies.
    b.data.reserve(kChunk);
    b.data.assign(first);
    b.bytes = b.data.size();
    lines.feed(b.data);
    for (;;) {
      if (!push(b)) return;
      b = spare();
      b.data.resize(kChunk);  // a spare's is this size already: nothing to clear
      ssize_t n = ::read(fd_, b.data.data(), b.data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        b.data.clear();
        if (n < 0) {
          b.error = errno;  // said by the reader, as a serial read says it: no line after
        } else {
          lines.end();
        }
        push(b);
        break;
      }
      b.data.resize(static_cast<size_t>(n));
      b.bytes = b.data.size();
      lines.feed(b.data);
    }
    std::lock_guard lock(m_);
    done_ = true;
    cv_.notify_all();
  }
  // An empty batch: a spare one the reader gave back, or a new one.
  Batch spare() {
    Batch b;
    {
      std::lock_guard lock(m_);
      if (!spare_.empty()) {
        b = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    b.owned.clear();
    b.lines.clear();
    b.keys.clear();
    b.bytes = 0;
    b.error = 0;
    return b;
  }
  // Hands a batch on, waiting while kAhead are not taken; false once stopped.
  bool push(Batch& b) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return queue_.size() < kAhead || stop_; });
    if (stop_) {
      done_ = true;
      cv_.notify_all();
      return false;
    }
    queue_.push_back(std::move(b));
    cv_.notify_all();
    return true;
  }

  int fd_;
  const Scanner& scanner_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::vector<Batch> spare_;  // read, to be filled again
  bool stop_ = false, done_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

std::string errno_text(const std::string& path, int err) {
  return fmt::format("{}: {}", path, std::strerror(err));
}

bool binary(std::string_view head) {
  return head.find('\0') != std::string_view::npos;
}

// The rest of a regular file, from its first chunk on, read ahead (ReadAhead): the
// same lines in the same order as read_plain's own loop.
std::string read_ahead(int fd, const std::string& name, Scanner& scanner, std::string first) {
  ReadAhead ahead(fd, scanner, std::move(first));
  while (std::optional<ReadAhead::Batch> b = ahead.next()) {
    if (t_budget != nullptr) t_budget->charge(b->bytes);
    for (const LineAhead& a : b->lines)
      scanner.line(a, b->keys);
    if (b->error != 0) return errno_text(name, b->error);
    if (budget_spent()) break;
    ahead.recycle(std::move(*b));
  }
  return "";
}

// `regular`: a regular file, read ahead on a second thread once its first chunk says
// it is text and not a report of rankcheck's own.
std::string read_plain(int fd, const std::string& name, Scanner& scanner, std::string& buf,
                       bool regular) {
  LineSplitter lines(scanner);
  bool first = true;
  std::string json;  // the input so far, while it may be a report of rankcheck's own
  bool maybe_json = false;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_text(name, errno);
    }
    if (n == 0) break;
    std::string_view chunk(buf.data(), static_cast<size_t>(n));
    if (first) {
      first = false;
      if (chunk.size() >= 2 && static_cast<unsigned char>(chunk[0]) == 0x1f &&
          static_cast<unsigned char>(chunk[1]) == 0x8b)
        return "gzip";  // the caller reads it again, through zlib
      if (binary(chunk.substr(0, 4096))) return "binary";
      scanner.begin_source(name);
      // One JSON object, not JSON lines (a structured log: '{' begins its second line).
      size_t start = chunk.find_first_not_of(" \t\r\n");
      size_t nl = chunk.find('\n');
      maybe_json = start != std::string_view::npos && chunk[start] == '{' &&
                   (nl == std::string_view::npos || chunk.substr(nl + 1, 1) != "{");
      if (regular && !maybe_json) return read_ahead(fd, name, scanner, std::string(chunk));
    }
    if (maybe_json) {
      json.append(chunk);
      if (json.size() <= kMaxReport) continue;
      maybe_json = false;  // too large for a report: its lines, as they are
      lines.feed(json);
      json.clear();
      json.shrink_to_fit();
      if (budget_spent()) break;
      continue;
    }
    lines.feed(chunk);
    if (budget_spent()) break;
  }
  if (first) scanner.begin_source(name);  // an empty file is still an input
  if (maybe_json && !report_lines(json, lines)) lines.feed(json);
  lines.end();
  return "";
}

std::string read_gzip(const std::string& path, Scanner& scanner, std::string& buf) {
#ifdef RANKCHECK_HAVE_ZLIB
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return errno_text(path, errno ? errno : ENOMEM);
  gzbuffer(gz, 256 * 1024);
  scanner.begin_source(path);
  LineSplitter lines(scanner);
  for (;;) {
    int n = gzread(gz, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(gz, &code);
      gzclose(gz);
      return fmt::format("{}: not a readable gzip file ({})", path, why);
    }
    if (n == 0) break;
    lines.feed(std::string_view(buf.data(), static_cast<size_t>(n)));
    if (budget_spent()) break;
  }
  // A stream that ends early reads as a clean end, with Z_BUF_ERROR left behind: the
  // job's last lines, the ones that matter, would be missing without a word.
  int code = 0;
  std::string why = gzerror(gz, &code);
  gzclose(gz);
  if (code == Z_BUF_ERROR)
    return fmt::format(
        "{}: a truncated gzip file ({}); to read what it holds: zcat {} | "
        "rankcheck diagnose -",
        path, why, path);
  lines.end();
  return "";
#else
  (void)scanner;
  (void)buf;
  return fmt::format(
      "{}: gzip-compressed, and this rankcheck was built without zlib: "
      "decompress it first, or pipe it in (zcat {} | rankcheck diagnose -)",
      path, path);
#endif
}

std::string read_file(const std::string& path, Scanner& scanner, std::string& buf) {
  // Opened without blocking and checked on the descriptor itself: a FIFO with no
  // writer would wait forever, a device never ends. A pipe comes in on stdin.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno_text(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_text(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fmt::format(
        "{}: not a regular file (a pipe or a device?): pipe it in instead "
        "(rankcheck diagnose - < {})",
        path, path);
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::string r = read_plain(fd, path, scanner, buf, true);
  ::close(fd);
  if (r == "gzip") return read_gzip(path, scanner, buf);
  if (r == "binary") {
    scanner.skipped(path);
    return "";
  }
  return r;
}

// Directories below a given one that are read, at most: deeper ones are left out,
// and said. Each level holds only its own entries' names while the walk is in it.
constexpr size_t kMaxDepth = 64;

struct Walk {
  Scanner& scanner;
  std::string& buf;
  uint64_t too_deep = 0;
};

// Every regular file below `dir`, in the order of their whole paths (a folder's
// name sorts as if followed by its '/'), so that a run is the same every time.
std::string walk(const std::string& dir, size_t depth, Walk& w) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, bool>> entries;  // sort key, is a folder
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    bool folder = it->is_directory(sec) && !it->is_symlink(sec);
    bool file = !folder && it->is_regular_file(sec);
    if (!folder && !file) continue;
    std::string name = it->path().filename().string();
    entries.emplace_back(folder ? name + "/" : name, folder);
  }
  if (ec) return fmt::format("{}: {}", dir, ec.message());
  std::sort(entries.begin(), entries.end());
  std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (auto& [key, folder] : entries) {
    if (budget_spent()) break;
    if (folder) {
      key.pop_back();
      if (depth + 1 > kMaxDepth) {
        ++w.too_deep;
        continue;
      }
      if (std::string r = walk(base + key, depth + 1, w); !r.empty()) return r;
    } else if (std::string r = read_file(base + key, w.scanner, w.buf); !r.empty()) {
      return r;
    }
  }
  return "";
}

// Every path into the scanner, until the CPU budget is spent.
std::string read_each(const Input& in, Scanner& scanner) {
  namespace fs = std::filesystem;
  std::string buf(kChunk, '\0');
  for (const std::string& path : in.paths) {
    if (budget_spent()) break;
    if (path == "-") {
      std::string r = read_plain(0, "-", scanner, buf, false);
      if (r == "gzip" || r == "binary")
        return "-: standard input is not text (compressed or binary): decompress it first";
      if (!r.empty()) return r;
      continue;
    }
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec) return fmt::format("{}: {}", path, ec.message());
    if (fs::is_directory(st)) {
      Walk w{scanner, buf};
      if (std::string r = walk(path, 0, w); !r.empty()) return r;
      if (w.too_deep > 0) {
        // Said, not an error: what was read is diagnosed. Escaped: a hostile name.
        std::string note = fmt::format(
            "rankcheck diagnose: warning: {}: left out {} more than {} levels down\n",
            printable(path, 4096),
            w.too_deep == 1 ? std::string("1 folder") : fmt::format("{} folders", w.too_deep),
            kMaxDepth);
        std::fwrite(note.data(), 1, note.size(), stderr);
      }
    } else if (fs::is_regular_file(st) || fs::is_fifo(st) || fs::is_character_file(st)) {
      // Refused by read_file, with what to do instead, unless a regular file.
      std::string r = read_file(path, scanner, buf);
      if (!r.empty()) return r;
    } else {
      return fmt::format("{}: not a file or a directory", path);
    }
  }
  return "";
}

}  // namespace

std::string read_inputs(const Input& in, Scanner& scanner) {
  CpuBudget budget;
  budget.given = in.max_seconds;
  t_budget = &budget;
  std::string r = read_each(in, scanner);
  t_budget = nullptr;
  if (budget.spent) {
    // Said, not an error: what was read is diagnosed (a hostile or enormous input).
    std::string note = fmt::format(
        "rankcheck diagnose: warning: stopped reading after {:.1f} s of CPU time "
        "(--max-seconds {}) and {:.1f} MB: the rest of the input was not read, and the "
        "diagnosis is of what came before\n",
        cpu_seconds() - budget.start,
        in.max_seconds >= 0 ? fmt::format("{:g}", in.max_seconds)
                            : fmt::format("{:g} by default for this size", budget.limit()),
        double(budget.bytes) / 1e6);
    std::fwrite(note.data(), 1, note.size(), stderr);
  }
  return r;
}

}  // namespace rankcheck::diagnose
