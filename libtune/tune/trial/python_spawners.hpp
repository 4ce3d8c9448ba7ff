// Warm Python interpreters that start a node's Python trials by forking instead of
// exec'ing a new interpreter each time (tune/trial/python_spawner.py, docs/programs.md):
// one per interpreter the trials use, started on first use with the node's module folder
// on PYTHONPATH, each speaking the spawner's protocol (tune/trial/process.hpp), so the
// trial's keeper, process group, pipes and end are the same as for any worker. What
// they cannot run as a fresh interpreter would (another program, interpreter options,
// an environment that changes the interpreter's start-up) they exec as it is.
// Thread-safe: trials start from their own threads.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tune/trial/process.hpp"

namespace tune {

class python_spawners {
 public:
  // `module_dir`: where the node installed the libtune module and the spawner's script
  // (install_python_module); `env`: the environment the interpreters start with (the
  // node's trials' own, less what each trial adds).
  python_spawners(std::string module_dir, std::map<std::string, std::string> env);

  // The spawner for a command whose program is `program` (a resolved path): a warm
  // interpreter when it is a Python interpreter (an executable named python, python3,
  // python3.11, ...: an ELF file, not a wrapper script), started now if it is not yet;
  // none otherwise, or when it cannot start (the command is then exec'd as always).
  std::shared_ptr<spawner> for_program(const std::string& program);

  // Whether a program is a Python interpreter that a warm one can stand in for.
  static bool is_python(const std::string& program);

 private:
  std::string module_dir_;
  std::map<std::string, std::string> env_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<spawner>> warm_;  // by the interpreter's path
  std::map<std::string, int> starts_;                     // how often each was started
  std::map<std::string, bool> pythonic_;                  // is_python, by program
};

}  // namespace tune
