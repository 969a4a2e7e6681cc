#include "app/cli.h"
#include "app/output.h"

namespace rankcheck::cli {

Command add_local(CLI::App& root, const EnvMap& env) {
  auto* app = root.add_subcommand(
      "local", "Run a whole job of N members on this machine and print the master's report");
  auto o = std::make_shared<LocalOptions>();
  o->run.timeout_s = 30;
  auto color = std::make_shared<std::string>("auto");
  shown(app->add_option("-n,--nprocs", o->nprocs, "Members to start (1-1024)")
            ->capture_default_str()
            ->check(whole_number_in(1, 1024)),
        "N");
  shown(app->add_option("--master-port", o->run.flags.master_port,
                        "Port of the rendezvous (default: a free one)"),
        "PORT");
  shown(app->add_option("--job-id", o->run.flags.job_id, "Job id (default: local-<pid>)"), "ID");
  add_run_flags(*app, o->run, *color);
  // How local itself hands its members the token: not an option for people here.
  app->get_option("--token-fd")->group("");
  // Its members meet rank 0 directly, on its own machine: taken, and left out of --help.
  app->get_option("--no-relay")->group("");
  // Refused with the reason (each member takes its own GPU), and left out of --help.
  add_device_flag(*app, o->run.device);
  app->get_option("--device")->group("");
  return {app, [o, color, &env] {
            o->run.color = use_color(*color, env);
            keep_stdout_for_report();
            if (o->run.watch.command_stdout == 1) o->run.watch.command_stdout = report_fd();
            return run_local(*o, env);
          }};
}

}  // namespace rankcheck::cli
