// rankcheck: pre-launch rendezvous validator for multi-node GPU training.
// Parse, then run; only main turns the result into an exit code.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "app/cli.h"
#include "base/build_info.h"
#include "model/finding.h"

int main(int argc, char** argv) {
  using namespace rankcheck;
  const EnvMap env = process_env();
  CLI::App app{
      "rankcheck: check a distributed GPU job's ranks, rendezvous and NCCL before the "
      "real job starts.\nExit codes: 0 pass, 1 internal error, 2 usage, 3 mismatch, 4 "
      "incomplete rendezvous, 5 GPU/NCCL stage, 6 rejected, 7 cannot listen, 128+N "
      "signal N."};
  app.name("rankcheck");
  app.formatter(cli::help_formatter());
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  const cli::Command commands[] = {cli::add_run(app, env), cli::add_env(app, env),
                                   cli::add_local(app, env), cli::add_diagnose(app, env),
                                   cli::add_token(app)};
  // `rankcheck help [run|env|local|diagnose|token]` is `rankcheck [SUBCOMMAND] --help`.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == "help") {
    args.erase(args.begin());
    args.resize(std::min<size_t>(args.size(), 1));
    args.emplace_back("--help");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : exit_code::kUsage;
  }
  try {
    for (const cli::Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    return exit_code::kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankcheck: internal error: %s\n", e.what());
    return exit_code::kInternal;
  }
}
