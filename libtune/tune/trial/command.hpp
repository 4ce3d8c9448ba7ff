// A program trial's command line (docs/programs.md): an argv, never a shell string.
//
// Its configuration can reach it in the arguments:
//   placeholders  "${lr}", "--lr=${lr}", "${model.depth}" (a nested key): replaced by
//                 the value (strings as they are, numbers as JSON writes them, true /
//                 false, anything else as JSON); "$${" writes "${". Each argument stays
//                 one argument whatever the value holds (spaces, ;, quotes): there is no
//                 shell to inject into.
//   appended      with config_args::append, "--lr 0.01 --model.depth 3 ..." after the
//                 command, one pair per value (nested keys dotted), in key order.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

enum class config_args { none, append };

// The dotted names the placeholders of `argv` name ("lr", "model.depth"), in order, or
// the first malformed one ("${" without "}", an empty name).
expected<std::vector<std::string>> command_placeholders(const std::vector<std::string>& argv);

// The command for one trial's configuration. A placeholder naming a key the
// configuration lacks is an error naming it and the keys there are.
expected<std::vector<std::string>> render_command(const std::vector<std::string>& argv, const nlohmann::json& config,
                                                  config_args args = config_args::none);

// The value at a dotted name of a configuration, as an argument.
expected<std::string> config_argument(const nlohmann::json& config, const std::string& dotted);

// Where the command's program is, as the node resolves it for the trial: a name with a
// '/' is a path (relative: to `cwd`, the trial's working copy), else the first
// executable of that name on `path` (the trial's PATH; relative entries from `cwd`).
// The error says what was looked for where, so that it can be fixed from the driver.
expected<std::string> resolve_program(const std::string& name, const std::string& cwd, const std::string& path);

// Whether an experiment may set this variable in its trials' environment: a valid name
// (letters, digits, _; not first a digit) that libtune does not set itself for each
// trial (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, the trial's TUNE_* variables, MPS's):
// those are what keep a trial on its own cards.
status check_env_name(const std::string& name);

}  // namespace tune
