// NCCL's parameters (nccl/param.h): an integer as ncclLoadParam reads it, and the
// configuration files under the environment as initEnv reads them.

#include <map>

#include <catch2/catch.hpp>

#include "nccl/param.h"

using namespace rankcheck;

TEST_CASE("an NCCL parameter is strtoll's leading number, as ncclLoadParam reads it") {
  EnvMap env{{"A", "1 "},
             {"B", "3\r"},
             {"C", "1abc"},
             {"D", "abc"},
             {"E", ""},
             {"F", "0x10"},
             {"G", "99999999999999999999"},
             {"H", "-1"}};
  CHECK(nccl::param(env, "A", 7) == 1);
  CHECK(nccl::param(env, "B", 7) == 3);
  CHECK(nccl::param(env, "C", 7) == 1);
  CHECK(nccl::param(env, "D", 7) == 0);  // no digits: strtoll's 0, not the default
  CHECK(nccl::param(env, "E", 7) == 7);  // empty: the default
  CHECK(nccl::param(env, "F", 7) == 16);
  CHECK(nccl::param(env, "G", 7) == 7);  // out of range: the default
  CHECK(nccl::param(env, "H", 7) == -1);
  CHECK(nccl::param(env, "unset", 7) == 7);
}

TEST_CASE("nccl conf: the environment, then NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf") {
  std::map<std::string, std::string> files = {
      {"/home/u/.nccl.conf", "NCCL_SOCKET_IFNAME=eth1\n# NCCL_DEBUG=INFO\nNCCL_IB_HCA=mlx5\n"},
      {"/etc/nccl.conf", "NCCL_SOCKET_IFNAME=eth9\r\nNCCL_NET_GDR_LEVEL=PHB\r\nnot a line\n"},
      {"/tmp/job.conf", "NCCL_IB_HCA=mlx5_1\nNCCL_IB_HCA=mlx5_2\n"},
  };
  nccl::ReadFileFn read = [&files](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  nccl::Conf c = nccl::apply_conf({{"HOME", "/home/u"}, {"NCCL_IB_HCA", "mlx5_0"}}, read);
  CHECK(c.env.at("NCCL_IB_HCA") == "mlx5_0");  // the environment wins
  CHECK(c.env.at("NCCL_SOCKET_IFNAME") == "eth1");
  CHECK(c.from.at("NCCL_SOCKET_IFNAME") == "/home/u/.nccl.conf");
  CHECK(c.env.at("NCCL_NET_GDR_LEVEL") == "PHB\r");  // setEnvFile strips only the '\n'
  CHECK(c.from.at("NCCL_NET_GDR_LEVEL") == "/etc/nccl.conf");
  CHECK(c.from.count("NCCL_IB_HCA") == 0);
  CHECK(c.env.count("NCCL_DEBUG") == 0);
  CHECK(c.files_read == std::vector<std::string>{"/home/u/.nccl.conf", "/etc/nccl.conf"});

  // NCCL_CONF_FILE stands in for ~/.nccl.conf; the first line of a name wins.
  c = nccl::apply_conf({{"HOME", "/home/u"}, {"NCCL_CONF_FILE", "/tmp/job.conf"}}, read);
  CHECK(c.env.at("NCCL_IB_HCA") == "mlx5_1");
  CHECK(c.env.at("NCCL_SOCKET_IFNAME") == "eth9\r");  // from /etc, its '\r' kept
  CHECK(c.from.at("NCCL_SOCKET_IFNAME") == "/etc/nccl.conf");
}
