// A shared library's machine and exported symbols, from its section headers and
// .dynsym (the ELF-64 layout of the System V gABI): every field read by offset,
// little-endian, each read bounded by the file's size.

#include "host/elf.h"

#include <array>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace rankcheck {
namespace {

constexpr uint64_t kMaxFile = uint64_t{1} << 30;
constexpr uint64_t kMaxTable = uint64_t{64} << 20;  // .dynsym or .dynstr
constexpr uint32_t kShtDynsym = 11;
constexpr size_t kShdrSize = 64, kSymSize = 24;

#if defined(__x86_64__)
constexpr uint16_t kThisMachine = 62;  // EM_X86_64
#elif defined(__aarch64__)
constexpr uint16_t kThisMachine = 183;  // EM_AARCH64
#else
constexpr uint16_t kThisMachine = 0;
#endif

uint64_t le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = (v << 8) | p[i];
  return v;
}

struct File {
  int fd = -1;
  uint64_t size = 0;
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  // `n` bytes at `at`, all inside the file.
  bool read(uint64_t at, uint64_t n, std::vector<uint8_t>& out) const {
    if (at > size || n > size - at || n > kMaxTable) return false;
    out.resize(n);
    size_t done = 0;
    while (done < n) {
      ssize_t got = ::pread(fd, out.data() + done, n - done, off_t(at + done));
      if (got <= 0) return false;
      done += size_t(got);
    }
    return true;
  }
};

}  // namespace

std::optional<ElfExports> elf_exports(const std::string& path, std::string_view prefix) {
  File f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      uint64_t(st.st_size) > kMaxFile)
    return std::nullopt;
  f.size = uint64_t(st.st_size);
  std::vector<uint8_t> eh;
  // e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1).
  constexpr uint8_t kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (!f.read(0, 64, eh) || std::memcmp(eh.data(), kMagic, 4) != 0 || eh[4] != 2 || eh[5] != 1)
    return std::nullopt;
  ElfExports out;
  out.this_machine = le(&eh[18], 2) == kThisMachine;  // e_machine
  uint64_t shoff = le(&eh[40], 8);
  uint64_t shentsize = le(&eh[58], 2), shnum = le(&eh[60], 2);
  if (shoff == 0 || shnum == 0 || shentsize != kShdrSize) return std::nullopt;
  std::vector<uint8_t> sh;
  if (!f.read(shoff, shnum * kShdrSize, sh)) return std::nullopt;
  auto section = [&sh](uint64_t i) { return sh.data() + i * kShdrSize; };
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint8_t* s = section(i);
    if (le(s + 4, 4) != kShtDynsym) continue;
    uint64_t link = le(s + 40, 4);
    if (link >= shnum) return std::nullopt;
    std::vector<uint8_t> syms, strs;
    const uint8_t* str = section(link);
    if (!f.read(le(s + 24, 8), le(s + 32, 8), syms) ||
        !f.read(le(str + 24, 8), le(str + 32, 8), strs))
      return std::nullopt;
    for (size_t k = 0; k + kSymSize <= syms.size(); k += kSymSize) {
      const uint8_t* sym = syms.data() + k;
      uint64_t name = le(sym, 4);
      uint8_t bind = sym[4] >> 4;       // STB_GLOBAL 1, STB_WEAK 2
      uint64_t shndx = le(sym + 6, 2);  // SHN_UNDEF 0: imported, not exported
      if (shndx == 0 || (bind != 1 && bind != 2) || name >= strs.size()) continue;
      const char* text = reinterpret_cast<const char*>(strs.data() + name);
      size_t len = strnlen(text, strs.size() - name);
      std::string_view s_name(text, len);
      if (s_name.starts_with(prefix) && out.symbols.size() < 64) out.symbols.emplace_back(s_name);
    }
    return out;
  }
  return out;  // no .dynsym: nothing exported
}

}  // namespace rankcheck
