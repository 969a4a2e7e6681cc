#include "protocol/record_codec.h"

namespace rankcheck {

namespace {

void put_strings(Writer& w, const SharedList<std::string>& v) {
  w.u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v)
    w.str(s);
}

std::vector<std::string> get_strings(Reader& r, uint32_t max, size_t max_len,
                                     std::string_view what) {
  std::vector<std::string> v(r.count(max, what));
  for (auto& s : v)
    s = r.str(max_len, what);
  return v;
}

}  // namespace

void encode_record(Writer& w, const Record& r) {
  w.str(r.version);
  w.i32(r.rank);
  w.i32(r.nranks);
  w.i32(r.world_size);
  w.i32(r.local_rank);
  w.i32(r.local_world_size);
  w.i32(r.node_rank);
  w.i32(r.nnodes);
  w.str(r.launcher);
  w.str(r.master_addr);
  w.u16(r.master_port);
  put_strings(w, r.master_resolved);
  w.str(r.resolve_error);
  w.str(r.job_id);
  w.str(r.host);
  w.u32(r.pid);
  w.u32(static_cast<uint32_t>(r.conflicts.size()));
  for (const Conflict& c : r.conflicts) {
    w.u8(static_cast<uint8_t>(c.field));
    w.u32(static_cast<uint32_t>(c.values.size()));
    for (const Observation& o : c.values) {
      w.str(o.launcher);
      w.str(o.variable);
      w.str(o.value);
    }
  }
  w.u32(static_cast<uint32_t>(r.env.size()));
  for (const EnvVar& v : r.env) {
    w.str(v.name);
    w.str(v.value);
  }
  w.u64(r.env_digest);
  put_strings(w, r.interfaces);
  w.str(r.node_list);
  w.str(r.tasks_per_node);
  w.u8(r.distribution);
  encode_gpu(w, r.gpu);
  w.u64(r.started_unix_ms);
  encode_nccl_if(w, r.nccl_if);
  uint32_t sources =
      std::min<uint32_t>(static_cast<uint32_t>(r.env_sources.size()), kMaxEnvSources);
  w.u32(sources);
  for (uint32_t i = 0; i < sources; ++i) {
    w.str(r.env_sources.get()[i].name.substr(0, 64));
    w.str(r.env_sources.get()[i].value.substr(0, 128));
  }
  encode_nccl_net(w, r.nccl_net);
  encode_shm(w, r.shm);
  w.str(r.arch.str().substr(0, 32));
  encode_pcie(w, r.pcie);
}

void encode_shm(Writer& w, const ShmFacts& f) {
  w.u64(static_cast<uint64_t>(f.size));
  w.u64(static_cast<uint64_t>(f.avail));
  w.u64(static_cast<uint64_t>(f.segment));
  w.u8(f.flags);
}

void encode_nccl_if(Writer& w, const NcclIfFacts& f) {
  w.u8(f.state);
  w.u8(f.flags);
  w.str(f.name.str().substr(0, 64));
  w.str(f.address.str().substr(0, 64));
  w.str(f.rule.str().substr(0, kMaxShortString));
  w.str(f.error.str().substr(0, kMaxShortString));
  uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(f.socket.size()), kMaxNcclSocketIfs);
  w.u32(n);
  for (uint32_t i = 0; i < n; ++i)
    w.str(f.socket.get()[i].substr(0, 128));
  w.i32(f.rules_version);
  w.str(f.netns.str().substr(0, 128));
  w.u16(f.listen_port);
  w.u16(f.port_lo);
  w.u16(f.port_hi);
}

NcclIfFacts decode_nccl_if(Reader& r) {
  NcclIfFacts f;
  f.state = r.u8();
  if (f.state > NcclIfFacts::kNone) r.fail("unknown NCCL interface state");
  f.flags = r.u8();
  f.name = r.str(64, "NCCL interface");
  f.address = r.str(64, "NCCL interface address");
  f.rule = r.str(kMaxShortString, "NCCL interface rule");
  f.error = r.str(kMaxShortString, "NCCL interface error");
  f.socket = get_strings(r, kMaxNcclSocketIfs, 128, "NCCL socket interface");
  f.rules_version = r.i32();
  f.netns = r.str(128, "network namespace");
  f.listen_port = r.u16();
  f.port_lo = r.u16();
  f.port_hi = r.u16();
  return f;
}

void encode_gpu(Writer& w, const GpuFacts& g) {
  w.u8(static_cast<uint8_t>(g.state));
  w.str(g.error.substr(0, kMaxShortString));
  w.i32(g.cuda_version);
  w.str(g.driver.substr(0, 64));
  w.i32(g.device_count);
  w.str(g.visible_devices.substr(0, kMaxShortString));
  w.str(g.choice.substr(0, kMaxShortString));
  w.u32(static_cast<uint32_t>(g.devices.size()));
  for (const GpuDevice& d : g.devices) {
    w.i32(d.rank);
    w.i32(d.ordinal);
    w.str(d.uuid.substr(0, 64));
    w.str(d.pci_bus_id.substr(0, 64));
    w.str(d.name.substr(0, 128));
    w.u64(d.memory_bytes);
    w.u8(d.fabric_state);
    w.i32(d.fabric_status);
    w.u8(static_cast<uint8_t>(d.nvlinks));
  }
  w.str(g.nccl_path.substr(0, kMaxShortString));
  w.i32(g.nccl_version);
  w.str(g.nccl_error.substr(0, kMaxShortString));
  w.i32(g.granted);
  w.str(g.granted_by.substr(0, 128));
  w.str(g.nvml_error.substr(0, kMaxShortString));
}

GpuFacts decode_gpu(Reader& r) {
  GpuFacts g;
  uint8_t state = r.u8();
  if (state > static_cast<uint8_t>(GpuState::kStuck)) r.fail("unknown GPU state");
  g.state = static_cast<GpuState>(state);
  g.error = r.str(kMaxShortString, "GPU error");
  g.cuda_version = r.i32();
  g.driver = r.str(64, "driver version");
  g.device_count = r.i32();
  g.visible_devices = r.str(kMaxShortString, "CUDA_VISIBLE_DEVICES");
  g.choice = r.str(kMaxShortString, "device choice");
  g.devices.resize(r.count(kMaxRanksPerMember, "GPU"));
  for (GpuDevice& d : g.devices) {
    d.rank = r.i32();
    d.ordinal = r.i32();
    d.uuid = r.str(64, "GPU UUID");
    d.pci_bus_id = r.str(64, "PCI bus id");
    d.name = r.str(128, "GPU name");
    d.memory_bytes = r.u64();
    d.fabric_state = r.u8();
    d.fabric_status = r.i32();
    d.nvlinks = static_cast<int8_t>(r.u8());
    if (d.fabric_state > GpuDevice::kFabricCompleted && d.fabric_state != GpuDevice::kFabricUnread)
      r.fail("unknown fabric state");
  }
  g.nccl_path = r.str(kMaxShortString, "NCCL path");
  g.nccl_version = r.i32();
  g.nccl_error = r.str(kMaxShortString, "NCCL error");
  g.granted = r.i32();
  g.granted_by = r.str(128, "GPU grant");
  g.nvml_error = r.str(kMaxShortString, "NVML error");
  return g;
}

Record decode_record(Reader& r) {
  Record rec;
  rec.version = r.str(64, "version");
  rec.rank = r.i32();
  rec.nranks = r.i32();
  rec.world_size = r.i32();
  rec.local_rank = r.i32();
  rec.local_world_size = r.i32();
  rec.node_rank = r.i32();
  rec.nnodes = r.i32();
  rec.launcher = r.str(64, "launcher");
  rec.master_addr = r.str(kMaxShortString, "master address");
  rec.master_port = r.u16();
  rec.master_resolved = get_strings(r, kMaxAddresses, 64, "resolved address");
  rec.resolve_error = r.str(kMaxShortString, "resolve error");
  rec.job_id = r.str(kMaxShortString, "job id");
  rec.host = r.str(kMaxHostName, "host name");
  rec.pid = r.u32();
  rec.conflicts.resize(r.count(kMaxConflicts, "conflict"));
  for (Conflict& c : rec.conflicts) {
    uint8_t field = r.u8();
    if (field >= kFieldCount) r.fail("conflict names an unknown field");
    c.field = static_cast<Field>(field);
    c.values.resize(r.count(kMaxConflictValues, "conflict value"));
    // Two sources that disagree, or it is no conflict: the rules read the first.
    if (c.values.size() < 2) r.fail("a conflict names fewer than two sources");
    for (Observation& o : c.values) {
      o.field = c.field;
      o.launcher = r.str(64, "launcher");
      o.variable = r.str(kMaxShortString, "variable name");
      o.value = r.str(kMaxShortString, "variable value");
    }
  }
  std::vector<EnvVar> env(r.count(kMaxEnvVars, "environment variable"));
  for (EnvVar& v : env) {
    v.name = r.str(kMaxShortString, "variable name");
    v.value = r.str(kMaxEnvValue, "variable value");
  }
  rec.env = std::move(env);
  rec.env_digest = r.u64();
  rec.interfaces = get_strings(r, kMaxInterfaces, 64, "interface name");
  rec.node_list = r.str(kMaxEnvValue, "node list");
  rec.tasks_per_node = r.str(kMaxShortString, "tasks per node");
  rec.distribution = r.u8();
  rec.gpu = decode_gpu(r);
  rec.started_unix_ms = r.u64();
  rec.nccl_if = decode_nccl_if(r);
  std::vector<EnvVar> sources(r.count(kMaxEnvSources, "variable source"));
  for (EnvVar& v : sources) {
    v.name = r.str(64, "variable name");
    v.value = r.str(128, "variable source");
  }
  rec.env_sources = std::move(sources);
  rec.nccl_net = decode_nccl_net(r);
  ShmFacts shm;
  shm.size = static_cast<int64_t>(r.u64());
  shm.avail = static_cast<int64_t>(r.u64());
  shm.segment = static_cast<int64_t>(r.u64());
  shm.flags = r.u8();
  rec.shm = shm;
  rec.arch = r.str(32, "machine");
  rec.pcie = decode_pcie(r);
  if (!r.ok()) return rec;
  if (rec.shm->size < -1 || rec.shm->avail < -1 || rec.shm->segment < 0 ||
      (rec.shm->size >= 0 && (rec.shm->avail < 0 || rec.shm->avail > rec.shm->size)))
    r.fail("/dev/shm sizes out of bounds");
  // Shape checks: the rules may rely on these.
  if (rec.nranks < 1 || rec.nranks > kMaxRanksPerMember) r.fail("ranks per member out of bounds");
  if (rec.world_size < 1 || rec.world_size > kMaxWorldSize) r.fail("world size out of bounds");
  for (int32_t v : {rec.rank, rec.local_rank, rec.local_world_size, rec.node_rank, rec.nnodes}) {
    if (v < -kMaxWorldSize || v > kMaxWorldSize) r.fail("rank field out of bounds");
  }
  if (rec.distribution > static_cast<uint8_t>(Distribution::kUnknown)) {
    r.fail("unknown distribution");
  }
  if (!std::is_sorted(rec.env.begin(), rec.env.end(),
                      [](const EnvVar& a, const EnvVar& b) { return a.name < b.name; })) {
    r.fail("environment variables not sorted");
  }
  if (env_digest(rec.env.get()) != rec.env_digest) r.fail("environment digest does not match");
  return rec;
}

}  // namespace rankcheck
