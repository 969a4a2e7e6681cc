#include "app/cli.h"

namespace rankcheck::cli {

Command add_env(CLI::App& root, const EnvMap& env) {
  auto* app = root.add_subcommand(
      "env",
      "Print who this process thinks it is, every source of that, and the checks it can make "
      "alone; no rendezvous");
  auto o = std::make_shared<EnvOptions>();
  auto color = std::make_shared<std::string>("auto");
  add_identity_flags(*app, o->flags);
  shown(app->add_option("--host-name", o->host_name, "Host name to report (default: gethostname)"),
        "NAME");
  // A flag that takes a value only after '=': `--json` alone is JSON on stdout.
  shown(app->add_flag("--json{-}", o->json_path,
                      "JSON instead of text; --json=PATH writes it to PATH and prints the text, as "
                      "--json PATH does in run"),
        "[=PATH]");
  app->add_flag("--no-gpu", o->no_gpu, "Do not probe the GPUs and NCCL");
  shown(app->add_option("--nccl-lib", o->nccl_lib, "The libnccl.so the training job loads"),
        "PATH");
  add_device_flag(*app, o->device);
  shown(app->add_option("--resolve-timeout", o->resolve_timeout_s,
                        "Seconds to wait for MASTER_ADDR to resolve")
            ->capture_default_str()
            ->check(number_in(0.0, 60.0)),
        "SECONDS");
  add_color_flag(*app, *color);
  return {app, [o, color, &env] {
            o->color = use_color(*color, env);
            return run_env(*o, env);
          }};
}

}  // namespace rankcheck::cli
