#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <unistd.h>

#include "app/cli.h"

namespace rankcheck::cli {

namespace {

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, positional);
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
      size_t close = name.find('}', open);
      if (close == std::string::npos) break;
      name.erase(open, close + 1 - open);
    }
    return name;
  }
};

}  // namespace

std::shared_ptr<CLI::Formatter> help_formatter() {
  return std::make_shared<HelpFormatter>();
}

CLI::Option* shown(CLI::Option* opt, std::string_view what) {
  std::string d = opt->get_default_str();
  opt->option_text(d.empty() ? std::string(what) : fmt::format("{} (default {})", what, d));
  return opt;
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        double x = 0;
        size_t used = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        // std::stod takes "nan" and "inf", and every comparison with NaN is false:
        // a range check alone lets them through.
        if (used == 0 || used != v.size() || !std::isfinite(x)) {
          return fmt::format("{} is not a number (expected {} to {})", v, lo, hi);
        }
        if (x < lo || x > hi) return fmt::format("{} is not in {} to {}", v, lo, hi);
        return std::string();
      },
      fmt::format("NUMBER in {} to {}", lo, hi));
}

// A path option given as '' (an unset shell variable) would silently write nothing.
CLI::Validator a_path() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        return v.empty() ? std::string("an empty path (an unset variable?): give a file name")
                         : std::string();
      },
      "PATH");
}

CLI::Validator whole_number_in(long lo, long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        long x = 0;
        size_t used = 0;
        try {
          x = std::stol(v, &used);
        } catch (const std::out_of_range&) {
          return fmt::format("{} is too large (expected {} to {})", v, lo, hi);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != v.size()) {
          return fmt::format("{} is not a whole number (expected {} to {})", v, lo, hi);
        }
        if (x < lo || x > hi) return fmt::format("{} is not in {} to {}", v, lo, hi);
        return std::string();
      },
      fmt::format("INT in {} to {}", lo, hi));
}

void add_identity_flags(CLI::App& app, Flags& f) {
  auto group = "Identity (each beats the environment)";
  auto add = [&app, group](const char* name, std::optional<std::string>& v, const char* what,
                           const char* help) {
    shown(app.add_option(name, v, help)->group(group), what);
  };
  add("--rank", f.rank, "N", "Global rank of this process (else RANK, SLURM_PROCID, ...)");
  add("--world-size", f.world_size, "N", "Number of ranks in the job");
  add("--local-rank", f.local_rank, "N", "Rank on this host");
  add("--local-world-size", f.local_world_size, "N", "Ranks on this host");
  add("--node-rank", f.node_rank, "N", "Index of this node (node mode)");
  add("--nnodes", f.nnodes, "N", "Number of nodes (node mode)");
  add("--nproc-per-node", f.nproc_per_node, "N",
      "Node mode: this process stands for N consecutive ranks");
  add("--master-addr", f.master_addr, "HOST", "Host of rank 0 (else MASTER_ADDR)");
  add("--master-port", f.master_port, "PORT", "Port of the rendezvous (else MASTER_PORT, 29500)");
  add("--rendezvous-port", f.rendezvous_port, "PORT",
      "Port rankcheck meets on, when MASTER_PORT belongs to someone else (default: "
      "MASTER_PORT, or MASTER_PORT+1 under torchrun's agent store)");
  add("--job-id", f.job_id, "ID",
      "Job id; members of other jobs are refused (else SLURM_JOB_ID, TORCHELASTIC_RUN_ID)");
}

void add_run_flags(CLI::App& app, RunOptions& o, std::string& color) {
  shown(app.add_option("--host-name", o.host_name, "Host name to report (default: gethostname)"),
        "NAME");
  // At least a second: the master keeps half of one (at least) between its decision
  // and the deadline to send the verdicts, and a shorter run could never pass.
  shown(app.add_option("--timeout", o.timeout_s,
                       "Bound on the whole run, in seconds (at least 1: the master keeps 0.5 s "
                       "of it to send the verdicts)")
            ->capture_default_str()
            ->check(number_in(1.0, 86400.0)),
        "SECONDS");
  shown(app.add_option("--handshake-timeout", o.handshake_timeout_s,
                       "Seconds a connection has to complete its hello")
            ->capture_default_str()
            ->check(number_in(0.05, 600.0)),
        "SECONDS");
  shown(app.add_option("--progress-interval", o.progress_interval_s,
                       "Seconds between progress lines on stderr")
            ->capture_default_str()
            ->check(number_in(0.1, 3600.0)),
        "SECONDS");
  shown(app.add_option("--rehearsal-timeout", o.rehearsal_timeout_s,
                       "Seconds rank 0 gives each of NCCL's connections in the rehearsal (a "
                       "firewall that drops packets costs this much)")
            ->capture_default_str()
            ->check(number_in(0.05, 600.0)),
        "SECONDS");
  shown(
      app.add_option("--json", o.json_path, "Write the JSON report to PATH ('-': stdout, no text)")
          ->check(a_path()),
      "PATH");
  shown(app.add_option("--metrics", o.metrics_path,
                       "Write the run's metrics to PATH for node_exporter's textfile collector "
                       "(replaced whole: last run time, verdict, findings, timings)")
            ->check(a_path()),
        "PATH");
  shown(app.add_option("--exclude-file", o.exclude_path,
                       "On failure, write the hosts that hold the initiating failure to PATH as "
                       "one Slurm host list (sbatch --exclude); empty when there are none")
            ->check(a_path()),
        "PATH");
  shown(app.add_option("--token-file", o.token_file,
                       "The job token: hellos and verdicts are authenticated with it (else "
                       "RANKCHECK_TOKEN_FILE; rankcheck local makes one)"),
        "PATH");
  shown(app.add_option("--token-fd", o.token_fd,
                       "The job token from descriptor N, a pipe this process inherited (how "
                       "rankcheck local hands it to its members: no file is left behind)")
            ->check(whole_number_in(3, 1 << 20))
            ->excludes("--token-file"),
        "N");
  app.add_flag("--no-gpu", o.no_gpu, "Skip the GPU stage");
  app.add_flag("--no-relay", o.no_relay,
               "Every process connects to rank 0 itself; by default the members of a host "
               "meet it over one connection, through the first of them (a host relay)");
  shown(app.add_option("--nccl-roots-every", o.nccl_roots_every,
                       "Above N ranks, initialise NCCL with ncclCommInitRankScalable, one root "
                       "per N ranks, each made by the first rank of its block (NCCL 2.23 and "
                       "newer; the same N on every rank; 0: at any size, with one root)")
            ->capture_default_str()
            ->check(whole_number_in(0, 1 << 30)),
        "N");
  shown(app.add_option("--nccl-lib", o.nccl_lib,
                       "The libnccl.so the training job loads (else RANKCHECK_NCCL_LIB, "
                       "libnccl.so.2)"),
        "PATH");
  auto* bandwidth = shown(
      app.add_option_function<std::string>(
             "--bandwidth", [&o](const std::string& v) { o.bandwidth_bytes = parse_size(v); },
             "Also time an all-reduce of SIZE bytes (e.g. 256M, 1G) and report bus bandwidth")
          ->check(CLI::Validator(
              [](std::string& v) {
                return parse_size(v) > 0 ? std::string() : "expected a size such as 64M or 1G";
              },
              "SIZE")),
      "SIZE");
  shown(app.add_option("--min-busbw", o.min_busbw_gbps,
                       "With --bandwidth: a bus bandwidth below GBPS is a finding")
            ->check(number_in(0.001, 1e6))
            ->needs(bandwidth),
        "GBPS");
  app.add_flag("-q,--quiet", o.quiet, "No progress lines on stderr");
  add_color_flag(app, color);
  add_watch_flags(app, o.watch);
}

void add_watch_flags(CLI::App& app, WatchOptions& w) {
  shown(app.add_option("command", w.command,
                       "After a pass, run this command (after --) under watch: its output "
                       "passed through, its signals forwarded, its exit code returned")
            ->expected(-1),
        "-- CMD [ARGS...]");
  app.add_flag("--fail-fast", w.fail_fast,
               "With a command: end the job on every rank at its first failure (SIGTERM, then "
               "SIGKILL after --kill-grace) and exit with the failure's code");
  shown(app.add_option("--init-timeout", w.init_timeout_s,
                       "With a command: ranks that have not begun their init this long after "
                       "the first did are init-blocked (default: --timeout)")
            ->check(number_in(0.1, 7 * 86400.0)),
        "SECONDS");
  shown(app.add_option("--stall-after", w.stall_after_s,
                       "With a command: a rank that prints nothing and passes no marker this long "
                       "while others go on is job-stalled (default: not watched)")
            ->check(number_in(1, 7 * 86400.0)),
        "SECONDS");
  shown(app.add_option("--kill-grace", w.kill_grace_s,
                       "With --fail-fast: seconds between SIGTERM and SIGKILL")
            ->capture_default_str()
            ->check(number_in(0, 3600.0)),
        "SECONDS");
  shown(app.add_option("--watch-port", w.port,
                       "With a command: the port of rank 0's watch server (default: a free one; "
                       "open it where a firewall stands between the hosts)")
            ->check(whole_number_in(1, 65535)),
        "PORT");
  shown(app.add_option("--watch-linger", w.linger_s,
                       "With a command: how long rank 0 waits, after its own command ended, for "
                       "the other ranks' ends before its last report")
            ->capture_default_str()
            ->check(number_in(0, 86400.0)),
        "SECONDS");
}

void add_color_flag(CLI::App& app, std::string& color) {
  shown(app.add_option("--color", color, "Colour the text report: auto, always, never")
            ->capture_default_str()
            ->check(CLI::IsMember({"auto", "always", "never"})),
        "auto|always|never");
}

void add_device_flag(CLI::App& app, std::optional<int>& device) {
  shown(app.add_option("--device", device,
                       "CUDA device for this rank (default: LOCAL_RANK % visible)")
            ->check(whole_number_in(0, 1023)),
        "N");
}

uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  double n = 0;
  try {
    n = std::stod(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "B"    ? 1
                 : unit == "K" || unit == "KiB" ? 1024.0
                 : unit == "M" || unit == "MiB" ? 1024.0 * 1024
                 : unit == "G" || unit == "GiB" ? 1024.0 * 1024 * 1024
                                                : 0;
  double bytes = n * scale;
  if (!(bytes >= 4) || bytes > 64.0 * 1024 * 1024 * 1024) return 0;
  return static_cast<uint64_t>(bytes);
}

bool use_color(const std::string& mode, const EnvMap& env) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const std::string* term = env_get(env, "TERM");
  return ::isatty(1) == 1 && !under_mpi_launcher(env) && env_get(env, "NO_COLOR") == nullptr &&
         !(term != nullptr && *term == "dumb");
}

}  // namespace rankcheck::cli
