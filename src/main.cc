// rankcheck: pre-launch rendezvous validator for multi-node GPU training.
// Parse, then run; only main turns the result into an exit code.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "app/cli.h"
#include "base/build_info.h"
#include "base/text.h"
#include "model/finding.h"
#include "report/report.h"

namespace {

// COLUMNS when it is a number, else the width of the terminal stdout is; none for
// a pipe or a file.
std::optional<size_t> text_columns() {
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && *c != '\0') {
    char* end = nullptr;
    long n = std::strtol(c, &end, 10);
    if (*end == '\0' && n > 0) return size_t(n);
  }
  winsize ws{};
  if (::isatty(STDOUT_FILENO) == 1 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return size_t(ws.ws_col);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rankcheck;
  const EnvMap env = process_env();
  // Prose wraps to COLUMNS where it is given, else to a terminal's width; a log's
  // lines stay at 100 columns.
  if (auto columns = text_columns()) set_text_width(*columns);
  // A locale that asks for another character set than UTF-8 gets ASCII text.
  set_ascii_output(
      locale_wants_ascii(std::getenv("LC_ALL"), std::getenv("LC_CTYPE"), std::getenv("LANG")));
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
  bool help = !args.empty() && args.front() == "help";
  if (help) {
    args.erase(args.begin());
    args.resize(std::min<size_t>(args.size(), 1));
  }
  // A word where a subcommand goes that is none of them: said as such, not as
  // "a subcommand is required" (or, after help, the main help and exit 0).
  if (!args.empty() && !args.front().empty() && args.front().front() != '-' &&
      std::none_of(std::begin(commands), std::end(commands),
                   [&args](const cli::Command& c) { return c.app->check_name(args.front()); })) {
    std::fprintf(stderr,
                 "rankcheck: unknown subcommand '%s': run, env, local, diagnose or token "
                 "(rankcheck --help says what each does)\n",
                 printable(args.front(), 80).c_str());
    return exit_code::kUsage;
  }
  if (help) args.emplace_back("--help");
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--json: 1 required TEXT:PATH missing": an option given without its value.
    std::string what = e.what();
    auto colon = what.find(':');
    if (what.find("required") != std::string::npos && colon != std::string::npos) {
      std::fprintf(stderr, "rankcheck: %s needs a value after it (see --help)\n",
                   what.substr(0, colon).c_str());
      return exit_code::kUsage;
    }
    app.exit(e);
    return exit_code::kUsage;
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
