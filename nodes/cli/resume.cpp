// tune resume DIR: runs an experiment's tuning program again, as it was started (same
// program, same arguments, same folder), with TUNE_RESUME_DIR set: its fit() then
// continues the experiment (tune_config::resume) instead of starting a new one.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <variant>

#include "commands.hpp"
#include "options.hpp"
#include "tune/core/json_text.hpp"
#include "tune/tuner/store.hpp"

namespace tune::cli {
namespace {

// How the experiment's program was run (fit() wrote it into its store), from `dir`.
struct program_run {
  std::string exe, cwd;
  std::vector<std::string> argv;
  std::string shown;  // argv as one line
};

// The program's run, or the exit code after a message.
std::variant<program_run, int> recorded_run(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/experiment.db"))
    return fail("resume", "no experiment in " + dir + " (it has no experiment.db): give the folder fit() wrote");
  auto store = experiment_store::open(dir);
  if (!store) return fail("resume", store.error().message());
  auto command = (*store)->meta("command");
  if (!command) return fail("resume", command.error().message());
  if (!command->is_object() || !(*command)["argv"].is_array() || (*command)["argv"].empty() ||
      !(*command)["exe"].is_string())
    return fail("resume", dir + " does not say how its program was run; run that program again with "
                               "tune_config::resume = true and experiment_dir = " + dir);
  program_run run;
  run.exe = (*command)["exe"].get<std::string>();
  run.cwd = command->value("cwd", "/");
  for (auto& a : (*command)["argv"]) run.argv.push_back(a.is_string() ? a.get<std::string>() : json_text(a));
  for (auto& a : run.argv) run.shown += (run.shown.empty() ? "" : " ") + a;
  return run;
}

}  // namespace

int cmd_resume(const args& a) {
  po::options_description desc("tune resume options");
  desc.add_options()
      ("help,h", "show this help")
      ("dir", po::value<std::string>(), "the experiment's folder (what fit() wrote: tune_results/<name>-<time>)")
      ("print", "print the command it would run; run nothing");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (int rc = parse("resume", a, desc, "tune resume DIR [--print]", vm, &pos,
                     "Continues an experiment whose tuning program died: completed trials and stored results\n"
                     "are kept, trials that were running start again from their latest checkpoint.");
      rc >= 0)
    return rc;
  if (!vm.count("dir")) return fail("resume", "say which experiment: tune resume DIR", 2);
  std::error_code ec;
  auto dir = std::filesystem::absolute(vm["dir"].as<std::string>(), ec).lexically_normal().string();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  auto recorded = recorded_run(dir);
  if (auto* rc = std::get_if<int>(&recorded)) return *rc;
  auto& run = std::get<program_run>(recorded);
  if (vm.count("print")) {
    std::cout << "cd " << run.cwd << " && TUNE_RESUME_DIR=" << dir << " " << run.shown << "\n";
    return 0;
  }
  if (::access(run.exe.c_str(), X_OK) != 0)
    return fail("resume", "its program " + run.exe + " is gone or not executable: build it again there, or run your "
                          "program with tune_config::resume = true and experiment_dir = " + dir);
  if (::chdir(run.cwd.c_str()) != 0) return fail("resume", "cannot enter " + run.cwd + ", where it ran: " + std::strerror(errno));
  ::setenv("TUNE_RESUME_DIR", dir.c_str(), 1);
  std::cerr << "tune resume: running " << run.shown << " (in " << run.cwd << ")\n";
  std::vector<char*> cargv;
  for (auto& arg : run.argv) cargv.push_back(arg.data());
  cargv.push_back(nullptr);
  ::execv(run.exe.c_str(), cargv.data());
  return fail("resume", "cannot run " + run.exe + ": " + std::strerror(errno));
}

}  // namespace tune::cli
