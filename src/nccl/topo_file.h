#pragma once
// NCCL_TOPO_FILE as NCCL reads it: its own XML reader (src/graph/xml.cc,
// xmlLoadSub/xmlGetNode/xmlGetToken/xmlGetValue, alike at every tag v2.18.1-v2.30.7 but
// for the quotes), then the <system> element's version (topo.cc, ncclTopoXmlLoadSystem).
// A file NCCL cannot open it passes over at INFO level and detects the topology
// itself; one it cannot parse fails ncclCommInitRank.

#include <cstdint>
#include <string>
#include <string_view>

namespace rankcheck::nccl {

/// Why NCCL `nccl_version` (0: the newest) would fail on this file's text, in NCCL's
/// words where it has them, with the line: "line 3: XML Parse error : expecting '<', got
/// '\t' (NCCL reads only spaces and newlines between elements)"; "" when it reads it.
/// The reader: between elements only ' ', '\n', '\r'; a name or key ends at ' ', '>',
/// '/', '\n' or '\r'; attributes are separated by single spaces and end the tag with
/// '>' or '/>'; a value is in double quotes (from 2.27.3 single quotes too), at most 255
/// characters; "<!--" comments; every element closed by its own name.
std::string topo_file_error(std::string_view text, int32_t nccl_version);

}  // namespace rankcheck::nccl
