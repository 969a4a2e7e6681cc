// The outside world of `rankcheck diagnose`: files, directories, stdin and gzip,
// read in fixed chunks and handed to the scanner a line at a time. A line longer
// than kMaxLine is cut there (the rest of it is skipped), so memory stays bounded
// whatever the input holds.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#ifdef RANKCHECK_HAVE_ZLIB
#include <zlib.h>
#endif

#include "diagnose/internal.h"

namespace rankcheck::diagnose {
namespace {

constexpr size_t kChunk = 1 << 20;
constexpr size_t kMaxLine = 64 * 1024;

// Splits chunks into lines; a line's text is handed on once its end is seen.
class LineSplitter {
 public:
  explicit LineSplitter(Scanner& s) : scanner_(s) {}

  void feed(std::string_view chunk) {
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      std::string_view part = chunk.substr(0, nl);
      if (partial_.empty() && nl != std::string_view::npos) {
        scanner_.line(part.substr(0, kMaxLine));  // the common case: no copy
      } else {
        if (partial_.size() < kMaxLine) partial_.append(part.substr(0, kMaxLine - partial_.size()));
        if (nl != std::string_view::npos) {
          scanner_.line(partial_);
          partial_.clear();
        }
      }
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
    }
  }
  void end() {
    if (!partial_.empty()) scanner_.line(partial_);
    partial_.clear();
  }

 private:
  Scanner& scanner_;
  std::string partial_;
};

std::string errno_text(const std::string& path, int err) {
  return fmt::format("{}: {}", path, std::strerror(err));
}

bool binary(std::string_view head) {
  return head.find('\0') != std::string_view::npos;
}

std::string read_plain(int fd, const std::string& name, Scanner& scanner, std::string& buf) {
  LineSplitter lines(scanner);
  bool first = true;
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
    }
    lines.feed(chunk);
  }
  if (first) scanner.begin_source(name);  // an empty file is still an input
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_text(path, errno);
  std::string r = read_plain(fd, path, scanner, buf);
  ::close(fd);
  if (r == "gzip") return read_gzip(path, scanner, buf);
  if (r == "binary") {
    scanner.skipped(path);
    return "";
  }
  return r;
}

}  // namespace

std::string read_inputs(const Input& in, Scanner& scanner) {
  namespace fs = std::filesystem;
  std::string buf(kChunk, '\0');
  for (const std::string& path : in.paths) {
    if (path == "-") {
      std::string r = read_plain(0, "-", scanner, buf);
      if (r == "gzip" || r == "binary")
        return "-: standard input is not text (compressed or binary): decompress it first";
      if (!r.empty()) return r;
      continue;
    }
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec) return fmt::format("{}: {}", path, ec.message());
    if (fs::is_directory(st)) {
      // Every file below, in name order, so that a run is the same every time.
      std::vector<std::string> files;
      fs::recursive_directory_iterator it(path, fs::directory_options::none, ec), end;
      for (; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec)) files.push_back(it->path().string());
      }
      if (ec) return fmt::format("{}: {}", path, ec.message());
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        std::string r = read_file(f, scanner, buf);
        if (!r.empty()) return r;
      }
    } else if (fs::is_regular_file(st) || fs::is_fifo(st) || fs::is_character_file(st)) {
      std::string r = read_file(path, scanner, buf);
      if (!r.empty()) return r;
    } else {
      return fmt::format("{}: not a file or a directory", path);
    }
  }
  return "";
}

}  // namespace rankcheck::diagnose
