#include <cstdio>

#include "app/cli.h"
#include "app/output.h"
#include "base/text.h"
#include "diagnose/diagnose.h"
#include "model/finding.h"

namespace rankcheck::cli {

Command add_diagnose(CLI::App& root, const EnvMap& env) {
  auto* app = root.add_subcommand(
      "diagnose",
      "Read the logs of a job that already hung or failed and name the initiating failure: "
      "files, directories (torchrun's log dir, Slurm output), '-' for stdin, .gz");
  struct Options {
    diagnose::Input input;
    std::string json_path;  // as run's --json: "-" for JSON instead of text, or a file
    std::string color = "auto";
  };
  auto o = std::make_shared<Options>();
  shown(app->add_option("paths", o->input.paths, "Log files or directories ('-': standard input)")
            ->required(),
        "LOG...");
  // A flag that takes a value only after '=': `--json logs/` reads logs/.
  shown(app->add_flag("--json{-}", o->json_path,
                      "JSON instead of text; --json=PATH writes it to PATH and prints the text, as "
                      "--json PATH does in run"),
        "[=PATH]");
  shown(app->add_option("--max-seconds", o->input.max_seconds,
                        "CPU seconds to spend at most; past them it stops reading and diagnoses "
                        "what it read (default: 30, and 1 more for each 100 MB read; 0: no bound)")
            ->check(number_in(0.0, 1e6)),
        "SECONDS");
  add_color_flag(*app, o->color);
  return {app, [o, &env] {
            diagnose::Scanner scanner;
            std::string error = diagnose::read_inputs(o->input, scanner);
            if (!error.empty()) {
              // The path may be a hostile file name found in a log directory.
              std::fprintf(stderr, "rankcheck diagnose: cannot read %s\n",
                           printable(error, 4096).c_str());
              return exit_code::kUsage;
            }
            diagnose::Diagnosis d = scanner.finish();
            if (d.lines == 0) {
              // An empty file or folder is not a clean log: a torchrun --log_dir that
              // crashed before it wrote anything looks just like this.
              std::fprintf(stderr,
                           "rankcheck diagnose: nothing to read: %s held no lines (an empty "
                           "file or folder, or only binary files)\n",
                           printable(format_list(o->input.paths, 4), 4096).c_str());
              return exit_code::kUsage;
            }
            Output out{.json_path = o->json_path,
                       .color = use_color(o->color, env),
                       .metrics_path = {},
                       .exclude_path = {}};
            Status written =
                out.emit([&] { return diagnose::render_text(d, out.color); },
                         [&](const JsonSink& sink) { sink(diagnose::render_json(d)); });
            return with_written(written, d.exit_code());
          }};
}

}  // namespace rankcheck::cli
