#pragma once
// Each subcommand binds an options struct in its cli_<name>.cc and runs after
// parsing. CLI11 stays in these files.

#include <functional>
#include <memory>

#include <CLI/CLI.hpp>

#include "app/run.h"
#include "base/env.h"
#include "identity/identity.h"

namespace rankcheck::cli {

/// A subcommand: its parser, and what runs once it parsed.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_run(CLI::App& root, const EnvMap& env);
Command add_env(CLI::App& root, const EnvMap& env);
Command add_local(CLI::App& root, const EnvMap& env);
/// `rankcheck diagnose LOGS...`: the initiating failure in a failed job's logs.
Command add_diagnose(CLI::App& root, const EnvMap& env);
/// `rankcheck token [PATH]`: a fresh job token.
Command add_token(CLI::App& root);

/// --help's formatter: a flag's value when given bare ("--json{-}") is not shown as
/// part of its name. Set on the root before the subcommands, which copy it.
std::shared_ptr<CLI::Formatter> help_formatter();
/// `opt` as --help shows it: `what` its value (SECONDS, PATH, auto|always|never) and
/// its default, instead of the parser's types and checks.
CLI::Option* shown(CLI::Option* opt, std::string_view what);
/// --rank, --world-size, ... : strings, so that the identity parser names a bad value.
void add_identity_flags(CLI::App& app, Flags& flags);
/// A finite number from lo to hi: "nan" and "inf" are refused, like any word.
CLI::Validator number_in(double lo, double hi);
/// A whole number from lo to hi: "abc" is "not a whole number", not "out of range".
CLI::Validator whole_number_in(long lo, long hi);
/// --device: the CUDA device of this rank (run and env; local gives each member its own).
void add_device_flag(CLI::App& app, std::optional<int>& device);
/// --color auto|always|never (use_color resolves it).
void add_color_flag(CLI::App& app, std::string& color);
/// --timeout, --json, --no-gpu, --quiet, --color and friends.
void add_run_flags(CLI::App& app, RunOptions& options, std::string& color);
/// `-- CMD` and the flags of the job under watch (--fail-fast, --init-timeout, ...).
void add_watch_flags(CLI::App& app, WatchOptions& watch);
/// "256M", "1G", "4096": bytes, or 0 when not a size from 4 B to 64 GiB.
uint64_t parse_size(const std::string& text);
/// Resolves --color auto|always|never against the terminal and NO_COLOR.
bool use_color(const std::string& mode, const EnvMap& env);

}  // namespace rankcheck::cli
