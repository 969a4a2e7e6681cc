#include "app/cli.h"
#include "app/output.h"

namespace rankcheck::cli {

Command add_run(CLI::App& root, const EnvMap& env) {
  auto* app = root.add_subcommand(
      "run",
      "Be one member of a job: check this process's identity, meet every other member at the "
      "master (rank 0 hosts it), and exit with the job-wide verdict");
  auto o = std::make_shared<RunOptions>();
  auto color = std::make_shared<std::string>("auto");
  add_identity_flags(*app, o->flags);
  add_run_flags(*app, *o, *color);
  add_device_flag(*app, o->device);
  shown(app->add_option("--bootstrap", o->bootstrap,
                        "How members meet: tcp (the master on MASTER_ADDR:MASTER_PORT), or mpi "
                        "(under mpirun, with rankcheck-mpi)")
            ->capture_default_str()
            ->check(CLI::IsMember({"tcp", "mpi"})),
        "tcp|mpi");
  return {app, [o, color, &env] {
            o->color = use_color(*color, env);
            keep_stdout_for_report();
            if (o->watch.command_stdout == 1) o->watch.command_stdout = report_fd();
            return run_process(*o, env);
          }};
}

}  // namespace rankcheck::cli
