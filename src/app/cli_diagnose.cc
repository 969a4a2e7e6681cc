#include <cstdio>

#include "app/cli.h"
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
    bool json = false;
    std::string color = "auto";
  };
  auto o = std::make_shared<Options>();
  shown(app->add_option("paths", o->input.paths, "Log files or directories ('-': standard input)")
            ->required(),
        "LOG...");
  app->add_flag("--json", o->json, "JSON instead of text");
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
            std::string out = o->json ? diagnose::render_json(d)
                                      : diagnose::render_text(d, use_color(o->color, env));
            std::fwrite(out.data(), 1, out.size(), stdout);
            return d.exit_code();
          }};
}

}  // namespace rankcheck::cli
