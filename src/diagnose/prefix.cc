// Line prefixes: who printed a line, peeled off its front by hand (every line of
// the input passes here, so no regex), and the literal prefilter.

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "base/text.h"
#include "diagnose/internal.h"
#include "nccl/log_line.h"

namespace rankcheck::diagnose {
namespace {

constexpr auto digit = is_digit;
constexpr auto digits = read_digits;
constexpr auto starts = starts_at;

// "[default3]:" / "[trainer12]:" (a local rank) or "[rank3]:" (a global rank).
size_t torchrun_prefix(std::string_view s, size_t p, Prefix& out) {
  if (!starts(s, p, "[")) return 0;
  size_t q = p + 1;
  while (q < s.size() && q - p < 40 && (is_alpha(s[q]) || s[q] == '_'))
    ++q;
  if (q == p + 1) return 0;
  long v = -1;
  size_t n = digits(s, q, 7, v);
  if (n == 0 || !starts(s, q + n, "]:")) return 0;
  if (s.substr(p + 1, q - p - 1) == "rank") {
    out.rank = v;
  } else {
    out.local_rank = v;
  }
  out.launchers |= Prefix::kTorchrun;
  return q + n + 2 - p;
}

// Open MPI --tag-output: "[1,3]<stdout>:".
size_t mpirun_prefix(std::string_view s, size_t p, Prefix& out) {
  if (!starts(s, p, "[")) return 0;
  long job = -1, rank = -1;
  size_t n = digits(s, p + 1, 10, job);
  if (n == 0 || !starts(s, p + 1 + n, ",")) return 0;
  size_t m = digits(s, p + 2 + n, 8, rank);
  size_t q = p + 2 + n + m;
  if (m == 0 || !starts(s, q, "]<")) return 0;
  // Bounded: on a line of many "[1,2]<" the search must not rescan the rest each time.
  size_t close = s.substr(0, std::min(s.size(), q + 12)).find(">:", q);
  if (close == std::string_view::npos) return 0;
  out.rank = rank;
  out.launchers |= Prefix::kMpirun;
  return close + 2 - p;
}

// "[2025-03-01 12:00:00] " (NCCL 2.26+), "[2024-07-25 06:36:18,293] " (torchrun's
// agent, 2.1-2.3), "[E1130 11:02:10.123456 123 file.cpp:42] " (glog, bracketed),
// "[E ProcessGroupNCCL.cpp:737] " (old glog).
size_t bracket_stamp(std::string_view s, size_t p, Prefix& out) {
  if (!starts(s, p, "[") || p + 3 >= s.size()) return 0;
  size_t close = s.substr(0, std::min(s.size(), p + 121)).find(']', p);
  if (close == std::string_view::npos) return 0;
  long v = 0;
  bool dated = digits(s, p + 1, 4, v) == 4 && starts(s, p + 5, "-");
  char sev = s[p + 1];
  bool glog = (sev == 'I' || sev == 'W' || sev == 'E' || sev == 'F') &&
              ((digits(s, p + 2, 4, v) == 4 && starts(s, p + 6, " ")) || starts(s, p + 2, " "));
  if (!dated && !glog) return 0;
  std::string_view inner = s.substr(p + 1, close - p - 1);
  if (dated) {
    out.time = inner;
  } else if (inner.size() > 6 && digit(inner[1])) {
    size_t sp = inner.find(' ', 6);
    out.time = inner.substr(0, sp);
  }
  size_t end = close + 1;
  if (starts(s, end, " ")) ++end;
  return end - p;
}

// The Python logger of torch 2.4+ and glog without brackets:
// "W1010 11:39:41.458000 140602427192448 torch/distributed/run.py:757] ".
size_t bare_glog(std::string_view s, size_t p, Prefix& out) {
  if (p + 6 >= s.size()) return 0;
  char sev = s[p];
  long v = 0;
  if ((sev != 'I' && sev != 'W' && sev != 'E' && sev != 'F') || digits(s, p + 1, 4, v) != 4 ||
      !starts(s, p + 5, " ") || !digit(s[p + 6]))
    return 0;
  size_t close = s.substr(0, std::min(s.size(), p + 162)).find("] ", p);
  if (close == std::string_view::npos) return 0;
  size_t sp = s.find(' ', p + 6);
  out.time = s.substr(p, sp - p);
  return close + 2 - p;
}

// Horovod's launcher (horovodrun with Gloo, safe_shell_exec's prefix_connection):
// "[3]<stderr>:", the rank and the stream; Determined's Horovod wrapper: "[rank=3] ".
size_t horovod_prefix(std::string_view s, size_t p, Prefix& out) {
  if (!starts(s, p, "[")) return 0;
  long rank = -1;
  if (starts(s, p + 1, "rank=")) {
    size_t n = digits(s, p + 6, 8, rank);
    if (n == 0 || !starts(s, p + 6 + n, "] ")) return 0;
    out.rank = rank;
    return 6 + n + 2;
  }
  size_t n = digits(s, p + 1, 8, rank);
  size_t q = p + 1 + n;
  if (n == 0 || !starts(s, q, "]<")) return 0;
  size_t len = starts(s, q + 2, "stdout>:") || starts(s, q + 2, "stderr>:") ? 10 : 0;
  if (len == 0) return 0;
  out.rank = rank;
  return q + len - p;
}

// MPICH's Hydra launcher and its proxies: "[mpiexec@node1] ", "[proxy:0:1@node2] ".
size_t hydra_prefix(std::string_view s, size_t p, Prefix& out) {
  if (p + 1 >= s.size() || (s[p + 1] != 'm' && s[p + 1] != 'p') ||
      (!starts(s, p, "[mpiexec@") && !starts(s, p, "[proxy:")))
    return 0;
  size_t close = s.substr(0, std::min(s.size(), p + 160)).find("] ", p);
  if (close == std::string_view::npos) return 0;
  size_t at = s.substr(0, close).find('@', p);
  if (at == std::string_view::npos || at + 1 == close) return 0;
  out.host = s.substr(at + 1, close - at - 1);
  return close + 2 - p;
}

// Open MPI's (opal_output, ORTE's and PRRTE's show_help and error logs, the signal
// handler's "*** Process received signal ***") and PMIx's: "[node3:10716] ", the
// host and the process id; UCX's adds its thread: "[node3:10716 :0:10740] ".
size_t ompi_host_prefix(std::string_view s, size_t p, Prefix& out) {
  if (!starts(s, p, "[")) return 0;
  size_t q = p + 1;
  while (q < s.size() && q - p <= 64 &&
         (is_alnum(s[q]) || s[q] == '-' || s[q] == '_' || s[q] == '.'))
    ++q;
  // A name, not an address: a letter somewhere ("8d6bf97c3bf4", a container's).
  std::string_view name = s.substr(p + 1, q - p - 1);
  if (name.empty() || !starts(s, q, ":") ||
      std::none_of(name.begin(), name.end(), [](char c) { return is_alpha(c); }))
    return 0;
  long pid = -1;
  size_t n = digits(s, q + 1, 8, pid);
  if (n == 0) return 0;
  size_t e = q + 1 + n;
  while (e < s.size() && e - q < 24 && s[e] == ' ')  // UCX pads the pid
    ++e;
  for (int part = 0; part < 2 && starts(s, e, ":"); ++part) {
    long v = 0;
    size_t m = digits(s, e + 1, 12, v);
    if (m == 0) return 0;
    e += 1 + m;
  }
  if (!starts(s, e, "] ")) return 0;
  out.host = name;
  return e + 2 - p;
}

// "YYYY-MM-DD?HH:MM:SS" at p (the separator any of "T", " ", "_"): its length, or 0.
size_t date_time(std::string_view s, size_t p) {
  long v = 0;
  if (digits(s, p, 4, v) != 4 || !starts(s, p + 4, "-") || digits(s, p + 5, 2, v) != 2 ||
      !starts(s, p + 7, "-") || digits(s, p + 8, 2, v) != 2 || p + 10 >= s.size())
    return 0;
  char sep = s[p + 10];
  if (sep != 'T' && sep != ' ' && sep != '_') return 0;
  if (digits(s, p + 11, 2, v) != 2 || !starts(s, p + 13, ":") || digits(s, p + 14, 2, v) != 2 ||
      !starts(s, p + 16, ":") || digits(s, p + 17, 2, v) != 2)
    return 0;
  return 19;
}

// An ISO 8601 stamp (kubectl logs --timestamps, journalctl -o short-iso, syslog's
// RFC 5424) or the Python logger's default "2024-07-25 06:36:18,293" before the text:
// "2024-07-25T06:36:18.123456789Z ", "2024-07-25 06:36:18,293 - ".
size_t bare_date(std::string_view s, size_t p, Prefix& out) {
  size_t n = date_time(s, p);
  if (n == 0) return 0;
  size_t q = p + n;
  if (q < s.size() && (s[q] == '.' || s[q] == ',')) {
    long v = 0;
    q += 1 + digits(s, q + 1, 9, v);
  }
  if (starts(s, q, "Z")) {
    ++q;
  } else if (q < s.size() && (s[q] == '+' || s[q] == '-')) {
    long v = 0;
    size_t h = digits(s, q + 1, 2, v);
    if (h == 2 && starts(s, q + 3, ":")) h += 1 + digits(s, q + 4, 2, v);
    if (h >= 2) q += 1 + h;
  }
  if (q < s.size() && s[q] != ' ' && s[q] != '\t') return 0;
  out.time = s.substr(p, q - p);
  while (q < s.size() && (s[q] == ' ' || s[q] == '\t'))
    ++q;
  return q - p;
}

// NCCL: "host:pid:tid [dev] " (nccl/log_line.h).
size_t nccl_prefix(std::string_view s, size_t p, Prefix& out) {
  nccl::LogPrefix n = nccl::read_log_prefix(s.substr(p));
  if (n.length == 0) return 0;
  out.host = n.host;
  out.pid = n.pid;
  return n.length;
}

// srun --label: "12: " (right-aligned with spaces to the widest task id).
size_t srun_label(std::string_view s, size_t p, Prefix& out) {
  size_t q = p;
  while (q < s.size() && q - p < 8 && s[q] == ' ')
    ++q;
  long v = -1;
  size_t n = digits(s, q, 7, v);
  if (n == 0 || !starts(s, q + n, ": ")) return 0;
  out.rank = v;
  out.launchers |= Prefix::kSrun;
  return q + n + 2 - p;
}

// pdsh / DeepSpeed: "host: " where host is a lower-case name or an address with a
// digit in it ("gpu-07: ", "10.0.0.3: "), so that "srun: " or "ValueError: " is not one.
size_t pdsh_prefix(std::string_view s, size_t p, Prefix& out) {
  size_t q = p;
  bool has_digit = false;
  while (q < s.size() && q - p < 64) {
    char c = s[q];
    if (digit(c)) {
      has_digit = true;
    } else if (!((c >= 'a' && c <= 'z') || c == '.' || c == '-' || c == '_')) {
      break;
    }
    ++q;
  }
  if (q == p || !has_digit || !starts(s, q, ": ")) return 0;
  out.host = s.substr(p, q - p);
  out.launchers |= Prefix::kPdsh;
  return q + 2 - p;
}

// Ray: "(raylet, ip=10.0.3.179) ", "(RayWorkerWrapper pid=2345, ip=10.0.0.2) ",
// "(pid=2345) ", vLLM's "(EngineCore pid=630) ": the process's pid and its node's address.
size_t ray_prefix(std::string_view s, size_t p, Prefix& out) {
  size_t close = s.substr(0, p + 162).find(')', p);  // a prefix is short: look no further
  if (close == std::string_view::npos || !starts(s, close + 1, " ")) return 0;
  std::string_view in = s.substr(p + 1, close - p - 1);
  size_t ip = in.find("ip="), pid = in.find("pid=");
  // The node's own daemons keep their name before the text: a raylet's or the GCS's
  // fatal line is the node's loss (catalogue.cc), not a worker's. Their node, still.
  bool daemon = in.starts_with("raylet") || in.starts_with("gcs_server") ||
                in.starts_with("pid=raylet") || in.starts_with("pid=gcs_server");
  if (ip != std::string_view::npos && (ip == 0 || in[ip - 1] == ' ')) {
    size_t end = ip + 3;
    while (end < in.size() && (digit(in[end]) || in[end] == '.' || in[end] == ':'))
      ++end;
    if (end == ip + 3) return 0;
    out.host = in.substr(ip + 3, end - ip - 3);
    if (daemon) return 0;
  } else if (daemon) {
    return 0;
  } else if (pid == std::string_view::npos || (pid > 0 && in[pid - 1] != ' ')) {
    return 0;
  }
  if (pid != std::string_view::npos && (pid == 0 || in[pid - 1] == ' ')) {
    long v = -1;
    if (digits(in, pid + 4, 10, v) > 0) out.pid = v;
  }
  return close + 2 - p;
}

}  // namespace

Prefix parse_prefix(std::string_view line) {
  Prefix out;
  size_t p = 0;
  // Prefixes nest in any order (srun's label outside torchrun's, a stamp inside);
  // a few rounds take them all.
  for (int round = 0; round < 8 && p < line.size(); ++round) {
    size_t n = 0;
    char c = line[p];
    if (c == '[') {
      if ((n = torchrun_prefix(line, p, out)) == 0 && (n = mpirun_prefix(line, p, out)) == 0 &&
          (n = horovod_prefix(line, p, out)) == 0 && (n = hydra_prefix(line, p, out)) == 0 &&
          (n = bracket_stamp(line, p, out)) == 0)
        n = ompi_host_prefix(line, p, out);
    } else if (c == ' ' || c == '\t' || digit(c)) {
      n = srun_label(line, p, out);
      if (n == 0 && !digit(c)) {  // an indented line: its prefixes follow the blanks
        while (p + n < line.size() && (line[p + n] == ' ' || line[p + n] == '\t'))
          ++n;
        if (round > 0 || p + n == line.size()) n = 0;
      }
      if (n == 0 && digit(c)) {
        if ((n = bare_date(line, p, out)) == 0 && (n = nccl_prefix(line, p, out)) == 0)
          n = pdsh_prefix(line, p, out);
      }
    } else if (c == '(') {
      n = ray_prefix(line, p, out);
    } else if (is_alpha(c)) {
      if ((n = bare_glog(line, p, out)) == 0 && (n = nccl_prefix(line, p, out)) == 0)
        n = pdsh_prefix(line, p, out);
    }
    if (n == 0) break;
    p += n;
  }
  out.body = p;
  return out;
}

int64_t time_key(std::string_view t) {
  long mon = 0, day = 0, h = 0, m = 0, sec = 0;
  size_t at = 0;
  if (date_time(t, 0) == 19) {  // 2025-03-01 12:00:00, 2026-11-30T16:43:52, 2026-11-30_15:36:14
    digits(t, 5, 2, mon);
    digits(t, 8, 2, day);
    at = 11;
  } else if (t.size() >= 14 && (t[0] == 'I' || t[0] == 'W' || t[0] == 'E' || t[0] == 'F') &&
             digits(t, 1, 2, mon) == 2 && digits(t, 3, 2, day) == 2 && t[5] == ' ') {
    at = 6;  // glog: E1130 11:02:10.123456
  } else {
    return -1;
  }
  if (digits(t, at, 2, h) != 2 || !starts(t, at + 2, ":") || digits(t, at + 3, 2, m) != 2 ||
      !starts(t, at + 5, ":") || digits(t, at + 6, 2, sec) != 2)
    return -1;
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || h > 23 || m > 59 || sec > 60) return -1;
  long micros = 0;
  size_t f = at + 8;
  if (f < t.size() && (t[f] == '.' || t[f] == ',')) {
    size_t n = 0;
    for (; n < 6 && f + 1 + n < t.size() && digit(t[f + 1 + n]); ++n)
      micros = micros * 10 + (t[f + 1 + n] - '0');
    for (; n < 6; ++n)
      micros *= 10;
  }
  int64_t days = (mon - 1) * 31 + (day - 1);
  return ((days * 24 + h) * 60 + m) * 60 * int64_t{1000000} + sec * int64_t{1000000} + micros;
}

std::string_view shell_prompt_host(std::string_view s) {
  size_t p = 0;
  if (starts(s, 0, "\\")) p = 1;  // a prompt pasted with the escape of its first byte
  if (starts(s, p, "(")) {        // a Python environment's name: "(venv) "
    size_t close = s.substr(0, std::min(s.size(), p + 64)).find(") ", p);
    if (close == std::string_view::npos) return {};
    p = close + 2;
  }
  bool bracket = starts(s, p, "[");
  if (bracket) ++p;
  auto name_char = [](char c) { return is_alnum(c) || c == '_' || c == '-' || c == '.'; };
  size_t user = p;
  while (p < s.size() && p - user < 32 && name_char(s[p]))
    ++p;
  if (p == user || !starts(s, p, "@")) return {};
  size_t host = ++p;
  while (p < s.size() && p - host < 64 && name_char(s[p]))
    ++p;
  if (p == host || p >= s.size() || s[p] != (bracket ? ' ' : ':')) return {};
  std::string_view name = s.substr(host, p - host);
  // The rest of the prompt up to "$ " or "# " (after "]" in the bracketed form).
  size_t end = s.substr(0, std::min(s.size(), p + 160)).find_first_of("$#", p);
  if (end == std::string_view::npos || (bracket && s[end - 1] != ']')) return {};
  if (end + 1 < s.size() && s[end + 1] != ' ') return {};
  return name;
}

size_t next_process_prefix(std::string_view line, size_t from) {
  for (size_t p = line.find('[', from); p != std::string_view::npos; p = line.find('[', p + 1)) {
    Prefix scratch;
    if (torchrun_prefix(line, p, scratch) > 0 || mpirun_prefix(line, p, scratch) > 0 ||
        horovod_prefix(line, p, scratch) > 0)
      return p;
  }
  return std::string_view::npos;
}

// -- the prefilter ------------------------------------------------------------

namespace {

// What most of a training job's log is, whatever failed: NCCL's INFO lines, the
// framework's and the launcher's progress. A literal's four bytes that the prefilter
// looks for are those these lines hold least ("Segmentation fault" is looked for by
// "Segm", not by the "faul" of every "[default3]:" prefix).
constexpr std::string_view kHealthyLines[] = {
    "gpu-a01:12345:12345 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>",
    "gpu-a01:12345:12345 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)",
    "gpu-a01:12345:12345 [0] NCCL INFO cudaDriverVersion 12020",
    "NCCL version 2.21.5+cuda12.4",
    "gpu-a01:12345:12399 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB "
    "eth0:10.1.2.3<0>",
    "gpu-a01:12345:12399 [0] NCCL INFO Using network IB",
    "gpu-a01:12345:12399 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId "
    "18000 "
    "commId 0x4a1b2c3d - Init START",
    "gpu-a01:12345:12399 [0] NCCL INFO Setting affinity for GPU 0 to ffff,ffffffff",
    "gpu-a01:12345:12399 [0] NCCL INFO comm 0x55d0c8e0 rank 0 nRanks 16 nNodes 2 localRanks 8 "
    "localRank 0 "
    "MNNVL 0",
    "gpu-a01:12345:12399 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
    "gpu-a01:12345:12399 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
    "gpu-a01:12345:12399 [0] NCCL INFO P2P Chunksize set to 524288",
    "gpu-a01:12345:12401 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
    "gpu-a01:12345:12401 [0] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/IB/0(1)/GDRDMA",
    "gpu-a01:12345:12401 [0] NCCL INFO Connected all rings",
    "gpu-a01:12345:12401 [0] NCCL INFO Connected all trees",
    "gpu-a01:12345:12401 [0] NCCL INFO 32 coll channels, 32 collnet channels, 0 nvls channels, 32 "
    "p2p "
    "channels, 32 p2p channels per peer",
    "gpu-a01:12345:12399 [0] NCCL INFO ncclCommInitRank comm 0x55d0c8e0 rank 0 nranks 16 cudaDev 0 "
    "nvmlDev 0 busId 18000 commId 0x4a1b2c3d localSize 8 - Init COMPLETE",
    "[default0]:[rank0]:[I1130 11:02:17.123456 4000 torch/distributed/distributed_c10d.py:88] "
    "Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 16 nodes.",
    "[rank3]:[W1130 11:02:18.000000 4003 ProcessGroupNCCL.cpp:4115] using GPU 3 to perform barrier",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Starting worker group",
    "Epoch 1:  45%|####5     | 450/1000 [01:23<01:40,  5.43it/s, loss=0.123, v_num=0]",
    "step 1200 | loss 2.3456 | lr 3.000e-04 | grad_norm 1.234 | tokens/s 181234 | "
    "throughput 412.5 samples/s | elapsed 00:12:34",
    "[2024-11-30 11:02:19,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, "
    "lr=[0.0001], mom=[(0.9, 0.999)]",
    "srun: job 123456 queued and waiting for resources",
    "Saving checkpoint to /checkpoints/run-7/step-1200 on node gpu-a01",
};

// Where in `lit` its four bytes least likely in a healthy line start: the window the
// lines above hold least, then the one of the rarest bytes (letters late in English's
// order, punctuation; never spaces or digits).
size_t rare_window(std::string_view lit) {
  if (lit.size() <= 4) return 0;
  static const std::unordered_map<uint32_t, int> common = [] {
    std::unordered_map<uint32_t, int> m;
    for (std::string_view line : kHealthyLines) {
      for (size_t i = 0; i + 4 <= line.size(); ++i) {
        uint32_t w;
        std::memcpy(&w, line.data() + i, 4);
        ++m[w];
      }
    }
    return m;
  }();
  auto byte_score = [](char c) {
    constexpr std::string_view kOrder = "etaoinsrhldcumfpgwybvkxjqz";
    if (c == ' ' || is_digit(c)) return 30;
    if (is_alpha(c)) {
      size_t k = kOrder.find(static_cast<char>(c | 0x20));
      return 26 - static_cast<int>(k);
    }
    return 8;
  };
  size_t best = 0;
  std::pair<int, int> best_key{std::numeric_limits<int>::max(), 0};
  for (size_t i = 0; i + 4 <= lit.size(); ++i) {
    uint32_t w;
    std::memcpy(&w, lit.data() + i, 4);
    auto it = common.find(w);
    std::pair<int, int> key{it == common.end() ? 0 : it->second,
                            byte_score(lit[i]) + byte_score(lit[i + 1]) + byte_score(lit[i + 2]) +
                                byte_score(lit[i + 3])};
    if (key < best_key) {
      best_key = key;
      best = i;
    }
  }
  return best;
}

}  // namespace

Prefilter::Prefilter(std::span<const Pattern> rows) {
  if (rows.size() > 128) throw std::length_error("prefilter: more than 128 catalogue rows");
  // The trie, then failure links breadth first, then the full transition table.
  std::vector<std::array<int32_t, 256>> go(1);
  go[0].fill(-1);
  out_.assign(1, Mask{});
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string_view lit = rows[r].literal;
    if (lit.empty()) continue;
    size_t s = 0;
    for (char ch : lit) {
      auto c = static_cast<unsigned char>(ch);
      if (go[s][c] < 0) {
        go[s][c] = static_cast<int32_t>(go.size());
        go.emplace_back().fill(-1);
        out_.emplace_back();
      }
      s = static_cast<size_t>(go[s][c]);
    }
    out_[s][r / 64] |= uint64_t{1} << (r % 64);
  }
  if (go.size() > 65535) throw std::length_error("prefilter: too many states");
  heads4_.assign(kHeadBits / 64, 0);
  heads3_.assign(kHeadBits / 64, 0);
  for (const Pattern& row : rows) {
    std::string_view lit = row.literal;
    if (lit.empty()) continue;  // a row without a literal is never a hit
    if (lit.size() < 3) {
      always_ = true;
      continue;
    }
    uint32_t head = 0;
    std::memcpy(&head, lit.data() + rare_window(lit), std::min<size_t>(lit.size(), 4));
    std::vector<uint64_t>& f = lit.size() >= 4 ? heads4_ : heads3_;
    any3_ = any3_ || lit.size() == 3;
    if (lit.size() == 3) starts3_[static_cast<unsigned char>(lit[0])] = 1;
    uint32_t bit = head_bit(head);
    f[bit / 64] |= uint64_t{1} << (bit % 64);
  }
  std::vector<size_t> fail(go.size(), 0);
  delta_.assign(go.size() * 256, 0);
  std::deque<size_t> queue;
  for (size_t c = 0; c < 256; ++c) {
    if (go[0][c] > 0) {
      queue.push_back(static_cast<size_t>(go[0][c]));
      delta_[c] = static_cast<uint16_t>(go[0][c]);
    }
  }
  while (!queue.empty()) {
    size_t s = queue.front();
    queue.pop_front();
    out_[s][0] |= out_[fail[s]][0];
    out_[s][1] |= out_[fail[s]][1];
    for (size_t c = 0; c < 256; ++c) {
      if (go[s][c] > 0) {
        size_t t = static_cast<size_t>(go[s][c]);
        fail[t] = delta_[fail[s] * 256 + c];
        delta_[s * 256 + c] = static_cast<uint16_t>(t);
        queue.push_back(t);
      } else {
        delta_[s * 256 + c] = delta_[fail[s] * 256 + c];
      }
    }
  }
  terminal_.resize(go.size());
  for (size_t s = 0; s < go.size(); ++s)
    terminal_[s] = (out_[s][0] | out_[s][1]) != 0;
}

bool Prefilter::automaton(std::string_view text, Mask& hits) const {
  size_t s = 0;
  bool any = false;
  const uint16_t* delta = delta_.data();
  for (char ch : text) {
    s = delta[s * 256 + static_cast<unsigned char>(ch)];
    if (terminal_[s]) {
      hits[0] |= out_[s][0];
      hits[1] |= out_[s][1];
      any = true;
    }
  }
  return any;
}

}  // namespace rankcheck::diagnose
