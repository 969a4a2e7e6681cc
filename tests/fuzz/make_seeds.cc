// Writes the seed corpus: valid frames of every type and hellos of every shape the
// tests know, so the fuzzers start from the grammar rather than from nothing.
//   make_seeds OUT_DIR

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "protocol/messages.h"
#include "protocol/record_codec.h"

using namespace rankcheck;

namespace {

std::vector<uint8_t> prefixed(uint8_t first, std::vector<uint8_t> rest) {
  rest.insert(rest.begin(), first);
  return rest;
}

void write(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

Record sample(int rank, bool gpu, bool conflicts) {
  Record r;
  r.version = "0.1.0";
  r.rank = rank;
  r.world_size = 8;
  r.local_rank = rank % 4;
  r.local_world_size = 4;
  r.node_rank = rank / 4;
  r.nnodes = 2;
  r.launcher = "slurm";
  r.master_addr = "gpu-01";
  r.master_port = 29500;
  r.master_resolved = {"10.0.0.11", "fd00::11"};
  r.job_id = "48213";
  r.host = rank < 4 ? "gpu-01" : "gpu-02";
  r.pid = 4242;
  std::vector<EnvVar> env{{"NCCL_IB_HCA", "mlx5"}, {"NCCL_SOCKET_IFNAME", "=eth0"}};
  r.env_digest = env_digest(env);
  r.env = env;
  r.interfaces = {"eth0", "ib0", "lo"};
  r.node_list = "gpu-[01-02]";
  r.tasks_per_node = "4(x2)";
  NcclIfFacts& nif = r.nccl_if.edit();
  nif.state = NcclIfFacts::kFound;
  nif.name = "eth0";
  nif.address = rank < 4 ? "10.0.0.11" : "10.0.0.12";
  nif.rule = "NCCL_SOCKET_IFNAME==eth0";
  nif.socket = {rank < 4 ? "eth0 10.0.0.11" : "eth0 10.0.0.12"};
  nif.rules_version = gpu ? 22809 : 0;
  nif.netns = "3f0c2e8a-3a9b-4f0e-9d47-2f7a4f6c1b7e/4026531840";
  nif.listen_port = 41234;
  nif.port_lo = 32768;
  nif.port_hi = 60999;
  // NCCL's data network: two RoCE ports with their GIDs (protocol 3).
  NcclNetFacts& net = r.nccl_net.edit();
  net.transport = NcclNetFacts::kIb;
  net.rule = "NCCL_IB_HCA=mlx5";
  net.gid_rule = "NCCL's own choice: RoCE v2, AF_INET";
  net.memlock = -1;
  net.memlock_need = 64 << 20;
  net.nics = 1;
  for (uint8_t i = 0; i < 2; ++i) {
    IbPortFacts p;
    p.device = "mlx5_" + std::to_string(i);
    p.state = IbPortFacts::kActive;
    p.link = IbPortFacts::kEthernet;
    p.flags = IbPortFacts::kSelected | IbPortFacts::kUsed;
    p.rate_gbps = 100;
    p.gid_index = 3;
    p.gid_roce = 2;
    p.gid_family = 4;
    p.gid = "::ffff:198.18.0.11";
    p.netdev = "ens1f" + std::to_string(i);
    net.ports.push_back(p);
  }
  r.env_sources = {{"NCCL_IB_HCA", "/etc/nccl.conf"}};
  if (conflicts) {
    r.conflicts.push_back(Conflict{
        Field::kRank,
        {{Field::kRank, "torch", "RANK", "5"}, {Field::kRank, "slurm", "SLURM_PROCID", "3"}}});
  }
  if (gpu) {
    r.gpu.state = GpuState::kUsable;
    r.gpu.cuda_version = 13000;
    r.gpu.driver = "580.65.06";
    r.gpu.device_count = 4;
    r.gpu.choice = "LOCAL_RANK 1 % 4 visible = device 1";
    r.gpu.devices = {GpuDevice{rank, rank % 4, "GPU-8f3c4a1b-0000-0000-0000-000000000001",
                               "00000000:18:00.0", "NVIDIA H100 80GB HBM3", 80ull << 30}};
    r.gpu.nccl_path = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
    r.gpu.nccl_version = 22809;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::filesystem::path out(argv[1]);
  int n = 0;
  for (bool gpu : {false, true}) {
    for (bool conflicts : {false, true}) {
      Record r = sample(gpu ? 5 : 0, gpu, conflicts);
      Writer w;
      encode_record(w, r);
      write(out / "hello" / ("record-" + std::to_string(n)), w.data());
      write(out / "frame" / ("hello-" + std::to_string(n)),
            prefixed(7, encode(Hello{r, {}, {}, {}})));
      ++n;
    }
  }
  Challenge c;
  c.master_version = "0.1.0";
  c.job_id = "48213";
  Verdict v;
  v.exit_code = 4;
  v.headline = "rank 9 never joined";
  v.notes.push_back(
      Finding{FindingId::kMissingRank, Severity::kError, 4, "m", "h", {9}, {"gpu-02"}});
  v.nccl_id = std::array<uint8_t, kNcclIdSize>{};
  v.watch_port = 41000;
  RankResult rr;
  rr.rank = 1;
  rr.init_ok = true;
  rr.nccl_warn = "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_0:1";
  rr.nccl_finding = "nccl-network-error";
  rr.nccl_net = "IB";
  WatchEvent watch_line;
  watch_line.kind = WatchEventKind::kLine;
  watch_line.text = "ValueError: boom";
  watch_line.finding = "process-died";
  RankResult same = rr;  // the same process's words: said once
  same.rank = 2;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> frames = {
      {"challenge", encode(c)},
      {"admit", encode(Admit{3, 8})},
      {"reject", encode(Reject{RejectCode::kForeignJob, "job 'x'"})},
      {"verdict", encode(v)},
      {"stage", encode(StageReport{{rr, same}})},
      {"watch-hello", encode(WatchHello{8, 4, "gpu-02", {}, {}})},
      {"watch-event", encode(WatchEventFrame{1, watch_line, {}})},
      {"watch-order", encode(WatchOrder{2, WatchOrderKind::kEnd, 8, "job-rank-failed", "m", {}})},
  };
  for (auto& [name, bytes] : frames) {
    write(out / "frame" / name, prefixed(3, bytes));  // first byte: the piece size
  }
  std::printf("seeds written to %s\n", out.c_str());
}
