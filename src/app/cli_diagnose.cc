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
  app->add_option("paths", o->input.paths, "Log files or directories ('-': standard input)")
      ->required();
  app->add_flag("--json", o->json, "JSON instead of text");
  app->add_option("--color", o->color, "Colour the text report: auto, always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
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
            std::string out = o->json ? diagnose::render_json(d)
                                      : diagnose::render_text(d, use_color(o->color, env));
            std::fwrite(out.data(), 1, out.size(), stdout);
            return d.exit_code();
          }};
}

}  // namespace rankcheck::cli
