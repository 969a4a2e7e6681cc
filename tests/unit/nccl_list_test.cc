// NCCL's list grammar (nccl/list.h): every reader of NCCL_SOCKET_IFNAME, NCCL_IB_HCA
// and the built-in interface orders goes through it, so these cases hold for each.

#include <catch2/catch.hpp>

#include "nccl/list.h"

using namespace rankcheck;
using nccl::list_matches;
using nccl::parse_list;

namespace {
nccl::List ifs(std::string_view spec) {
  return parse_list(spec, nccl::kMaxIfs);
}
}  // namespace

TEST_CASE("NCCL's lists: prefixes, exact names, exclusion") {
  std::vector<std::string> names{"lo", "eth0", "docker0"};
  CHECK(nccl::list_selects_any(ifs("eth"), names));
  CHECK(nccl::list_selects_any(ifs("ib,eth"), names));
  CHECK(!nccl::list_selects_any(ifs("ib"), names));
  CHECK(nccl::list_selects_any(ifs("=eth0"), names));
  CHECK(!nccl::list_selects_any(ifs("=eth"), names));
  CHECK(nccl::list_selects_any(ifs("^docker,lo"), names));  // eth0 remains
  CHECK(!nccl::list_selects_any(ifs("^docker,lo,eth"), names));
  CHECK(list_matches(ifs("mlx5_1"), "mlx5_10"));  // a prefix: mlx5_1 also takes mlx5_10
}

TEST_CASE("NCCL's lists: an empty list matches every name, and '^' alone none") {
  CHECK(list_matches(ifs(""), "eth0"));
  CHECK(!list_matches(ifs("^"), "eth0"));
  CHECK(!list_matches(ifs("^="), "eth0"));
  CHECK(parse_list("mlx5_0,,mlx5_1,", nccl::kMaxHcas).items.size() == 2);  // empty entries go
  CHECK(parse_list(":1,eth0", nccl::kMaxIfs).items.size() == 1);           // so does an empty name
}

TEST_CASE("NCCL's lists: a port is not part of the name, and an interface has none") {
  nccl::List l = ifs("eth0:1234");
  REQUIRE(l.items.size() == 1);
  CHECK(l.items[0].prefix == "eth0");
  CHECK(l.items[0].port == 1234);
  CHECK(list_matches(l, "eth0"));  // interfaces are matched with port -1: any
  nccl::List hca = parse_list("mlx5_0:1,mlx5_1:2", nccl::kMaxHcas);
  CHECK(list_matches(hca, "mlx5_0", 1));
  CHECK(!list_matches(hca, "mlx5_0", 2));
  CHECK(list_matches(hca, "mlx5_1", 2));
  CHECK(!list_matches(parse_list("mlx5_0=x", nccl::kMaxHcas), "mlx5_0", 1));
}

TEST_CASE("NCCL's lists: an empty port is port 0 before 2.30.7 and every port from it") {
  CHECK(!list_matches(parse_list("mlx5_0:", nccl::kMaxHcas, 22809), "mlx5_0", 1));
  CHECK(list_matches(parse_list("mlx5_0:", nccl::kMaxHcas, 23007), "mlx5_0", 1));
  CHECK(list_matches(parse_list("mlx5_0:", nccl::kMaxHcas, 0), "mlx5_0", 1));  // the newest
  // 2.30.7 reads a rail and a plane after the port: the port is still the port.
  CHECK(parse_list("mlx5_0:1:0:2", nccl::kMaxHcas, 23007).items[0].port == 1);
}

TEST_CASE("NCCL's lists: at most MAX_IFS or MAX_IB_DEVS entries, names cut at 63") {
  std::string many;
  for (int i = 0; i < 40; ++i)
    many += "if" + std::to_string(i) + ",";
  CHECK(ifs(many).items.size() == 16);
  CHECK(!list_matches(ifs("=" + many), "if16"));  // the 17th is not read
  CHECK(list_matches(ifs("=" + many), "if15"));
  CHECK(parse_list(many, nccl::kMaxHcas).items.size() == 32);
  CHECK(ifs(std::string(80, 'e')).items[0].prefix.size() == 63);
}

TEST_CASE("NCCL reads NCCL_SOCKET_IFNAME only when it is longer than one character") {
  CHECK(!nccl::ifname_is_read(""));
  CHECK(!nccl::ifname_is_read("^"));
  CHECK(nccl::ifname_is_read("ib"));
}
