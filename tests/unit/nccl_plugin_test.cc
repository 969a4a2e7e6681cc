// A network plugin NCCL would unload: the ELF reader on real shared libraries (the
// fake plugins tests/CMakeLists.txt builds), the ABI versions each NCCL release reads
// (src/plugin/net.cc at its tags), the choice, and the finding.

#include <catch2/catch.hpp>

#include "helpers.h"
#include "host/elf.h"
#include "host/sysfs_ib.h"
#include "nccl/ib.h"

using namespace rankcheck;

namespace {

const std::string kDir = RANKCHECK_FAKE_NET_DIR;

uint16_t bits(std::initializer_list<int> ns) {
  uint16_t b = 0;
  for (int n : ns)
    b = static_cast<uint16_t>(b | (1u << n));
  return b;
}

IbHostView cx7() {
  SysFs sys{std::string(RANKCHECK_FIXTURES) + "/sysfs/ib-cx7"};
  IbHostView v = sys.read_ib();
  v.verbs_library = true;
  v.memlock = -1;
  v.ipc_lock = false;
  return v;
}

NcclNetFacts with_plugin(std::optional<uint16_t> abi, int32_t version, const EnvMap& env = {}) {
  NcclNetInput in;
  in.env = &env;
  in.nccl_version = version;
  in.plugin = "/opt/ofi/lib/libnccl-net.so";
  in.plugin_tried = {"libnccl-net.so"};
  in.plugin_abi = abi;
  return choose_nccl_net(cx7(), in);
}

}  // namespace

TEST_CASE("the ELF reader: a plugin's exported symbols, without loading it", "[nccl_plugin]") {
  auto v5 = elf_exports(kDir + "/libnccl-net-v5.so", "ncclNetPlugin_v");
  REQUIRE(v5.has_value());
  CHECK(v5->this_machine);
  CHECK(v5->symbols == std::vector<std::string>{"ncclNetPlugin_v5"});
  auto v8 = elf_exports(kDir + "/libnccl-net-v8.so", "ncclNetPlugin_v");
  REQUIRE(v8.has_value());
  CHECK(v8->symbols == std::vector<std::string>{"ncclNetPlugin_v8"});
  // An ELF without such symbols (what it imports does not count: libc's are undefined
  // in it), a file that is no ELF, one that is not there.
  auto sh = elf_exports("/bin/sh", "ncclNetPlugin_v");
  REQUIRE(sh.has_value());
  CHECK(sh->this_machine);
  CHECK(sh->symbols.empty());
  CHECK(elf_exports(kDir + "/libnccl-net-v5.so", "malloc")->symbols.empty());
  CHECK_FALSE(elf_exports(std::string(RANKCHECK_FIXTURES) + "/sysfs/README.md", "").has_value());
  CHECK_FALSE(elf_exports("/nonexistent/libnccl-net.so", "").has_value());
  CHECK_FALSE(elf_exports("/dev/null", "").has_value());
}

TEST_CASE("the plugin versions each NCCL release reads", "[nccl_plugin]") {
  CHECK(nccl_plugin_abi_read(21806) == bits({4, 5, 6}));
  CHECK(nccl_plugin_abi_read(21904) == bits({5, 6, 7}));
  CHECK(nccl_plugin_abi_read(22105) == bits({5, 6, 7, 8}));
  CHECK(nccl_plugin_abi_read(22501) == bits({5, 6, 7, 8, 9}));
  CHECK(nccl_plugin_abi_read(22707) == bits({6, 7, 8, 9, 10}));
  CHECK(nccl_plugin_abi_read(22809) == bits({6, 7, 8, 9, 10, 11}));
  CHECK(nccl_plugin_abi_read(23007) == bits({6, 7, 8, 9, 10, 11, 12}));
  CHECK(nccl_plugin_abi_read(0) == nccl_plugin_abi_read(23007));  // not loaded: the newest
  CHECK(nccl_plugin_abi_read(21700) == 0xffff);                   // not read: any
  CHECK(nccl_plugin_abi_text(bits({6, 7, 8, 9, 10, 11})) == "v6-v11");
  CHECK(nccl_plugin_abi_text(bits({5, 8})) == "v5, v8");
  CHECK(nccl_plugin_abi_text(0) == "no ncclNetPlugin_v symbol");
}

TEST_CASE("a plugin NCCL does not read is unloaded, and NCCL's own transport used",
          "[nccl_plugin]") {
  // v5 only: 2.25 reads it, 2.28 does not and falls back to IB.
  NcclNetFacts old = with_plugin(bits({5}), 22501);
  CHECK(old.transport == NcclNetFacts::kPlugin);
  CHECK((old.flags & NcclNetFacts::kPluginRead) != 0);
  CHECK((old.flags & NcclNetFacts::kPluginUnsupported) == 0);
  NcclNetFacts now = with_plugin(bits({5}), 22809);
  CHECK(now.transport == NcclNetFacts::kIb);
  CHECK((now.flags & NcclNetFacts::kPluginUnsupported) != 0);
  CHECK(now.plugin == "/opt/ofi/lib/libnccl-net.so");
  CHECK(now.text() == "IB mlx5_0:1,mlx5_1:1 800G");
  // Symbols not read: taken as used, as before.
  CHECK(with_plugin(std::nullopt, 22809).transport == NcclNetFacts::kPlugin);
  // NCCL_NET naming the plugin's network finds none once it is unloaded.
  NcclNetFacts named = with_plugin(bits({5}), 22809, {{"NCCL_NET", "AWS Libfabric"}});
  CHECK(named.transport == NcclNetFacts::kNoNet);
}

TEST_CASE("findings: nccl-net-plugin-unsupported names the host and both sets of versions",
          "[nccl_plugin][rules]") {
  JobView v = test::healthy_job(2, 1);
  v.members[0].record.nccl_net = with_plugin(bits({8}), 22809);
  v.members[1].record.nccl_net = with_plugin(bits({5}), 22809);
  CHECK_FALSE(test::tracker_clean(v));
  auto fs = test::checks(v);
  const Finding* f = test::find(fs, "nccl-net-plugin-unsupported");
  REQUIRE(f != nullptr);
  CHECK_FALSE(f->is_error());
  CHECK(f->hosts == std::vector<std::string>{"gpu-02"});
  CHECK_THAT(f->message, Catch::Contains("(/opt/ofi/lib/libnccl-net.so) exports v5, and NCCL "
                                         "2.28.9 reads v6-v11") &&
                             Catch::Contains("carries the job over IB mlx5_0:1,mlx5_1:1 800G"));
  // The other host uses the plugin: the hosts' networks differ, as NCCL would run them.
  CHECK(test::find(fs, "nccl-net-plugin-mismatch") != nullptr);
  JobView both = test::healthy_job(2, 1);
  for (Member& m : both.members)
    m.record.nccl_net = with_plugin(bits({8}), 22809);
  CHECK(test::clean_and_silent(both));
}
