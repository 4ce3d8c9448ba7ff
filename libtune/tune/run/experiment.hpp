// Experiments described in a file, for `tune run` (docs/run.md): YAML, or JSON (which
// YAML reads too), read with yaml-cpp. Every key is checked before anything runs: an
// unknown key, a wrong type or a bad domain is an error that names the key, the file,
// line and column, and what to write instead.
//
//   command: [python3, train.py, --epochs, "8"]     # an argv: no shell
//   working_dir: .                                   # shipped to the nodes (relative to this file)
//   metric: val_acc
//   mode: max
//   num_samples: 20
//   space:
//     lr: {loguniform: [1.0e-4, 0.1]}
//     batch_size: {choice: [64, 128, 256]}
//     model: {depth: {randint: [1, 5]}}             # nested
//   resources_per_trial: {gpu: 0.25, cpu: 1}
//   scheduler: {type: asha, max_t: 8, grace_period: 1}
//   search: tpe
//
// Domains, as Ray Tune writes them: {uniform: [lo, hi]}, {loguniform: [lo, hi]},
// {quniform: [lo, hi, q]}, {qloguniform: [lo, hi, q]}, {randint: [lo, hi]} (hi
// excluded), {lograndint: [lo, hi]}, {choice: [a, b, ...]} (an option may be a mapping:
// a sub-space present only when chosen), {grid_search: [a, b, ...]}, {constant: v} (a
// value that would otherwise read as a domain). Any other mapping is a nested space;
// any other value a constant.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tune/tuner/plan.hpp"

namespace tune {

struct experiment_spec {
  program prog;         // prog.command empty: the file gives none (tune run's -- COMMAND then)
  search_space space;
  tune_config config;
  std::string source;   // the file it came from ("" : none)
};

// Reads an experiment file; relative paths in it (working_dir, experiment_dir) are taken
// from the file's folder. Without working_dir the trials get the folder tune run
// started in.
expected<experiment_spec> read_experiment_file(const std::string& path);
// The same from text: `source` names it in errors, `base_dir` is where relative paths
// start.
expected<experiment_spec> read_experiment(const std::string& text, const std::string& source, const std::string& base_dir);

// Parts of an experiment as YAML or JSON text (tune run's --space, --scheduler, --search
// flags); `source` names it in errors.
expected<search_space> read_search_space(const std::string& text, const std::string& source);
expected<scheduler_spec> read_scheduler(const std::string& text, const std::string& source);
expected<search_spec> read_search(const std::string& text, const std::string& source);

// The keys an experiment file may have, in the order errors list them: one table
// (experiment_keys.cpp) from which reading each key, its errors, `tune run --keys` and
// docs/run.md's table of keys all come.
struct experiment_key {
  std::string name;
  std::string type;           // what its value is: "whole number >= 1", "true or false", ...
  std::string default_value;  // its default as a value of the file ("1", "{cpu: 1}"); "" when
                              // the default is not one (default_note says it)
  std::string default_note;   // the default in words, when no value says it (Markdown)
  std::string help;           // what it does (Markdown: `code`, [links](file.md))
};
const std::vector<experiment_key>& experiment_keys();

// The keys as docs/run.md's table (Markdown, a line per key) and as `tune run --keys`
// prints them (plain text, for a terminal `width` wide).
std::string experiment_keys_markdown();
std::string experiment_keys_text(int width = 100);

}  // namespace tune
