#pragma once
// What the dynamic loader and NCCL would make of a shared library, read from the
// file without loading it: its machine, and the symbols it exports (its .dynsym).
// NCCL keeps a network plugin only when it exports an ncclNetPlugin_vN that its
// release reads (src/plugin/net.cc); loading a plugin to find out would run its
// constructors in rankcheck, so its ELF is read instead.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankcheck {

struct ElfExports {
  bool this_machine = false;  ///< built for the machine rankcheck runs on (dlopen would take it)
  /// Defined global or weak symbols of .dynsym that start with the prefix asked for.
  std::vector<std::string> symbols;
};

/// Reads `path` as a 64-bit little-endian ELF; nullopt when it is not one, cannot be
/// read, is larger than 1 GiB, or has no section headers to find .dynsym by (then what
/// the loader would do is not known here).
std::optional<ElfExports> elf_exports(const std::string& path, std::string_view prefix);

}  // namespace rankcheck
