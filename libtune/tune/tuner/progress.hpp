// The live progress of an experiment in a terminal, like Ray Tune's status table:
// trials running / pending / paused / terminated / errored, the best so far, and a
// row per trial with its latest metric. Where the output is not a terminal, plain
// lines say what changed instead (a line per trial that changed state, and the best
// when it improves). Pure: it renders snapshots; the controller takes them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/tuner/common.hpp"

namespace tune {

struct progress_trial {
  std::string id;
  std::string state;  // pending, running, paused, terminated, error
  int64_t iteration = 0;
  std::optional<double> value;  // the latest value of the metric
  nlohmann::json config = nlohmann::json::object();
  std::string error;
  bool feasible = true;  // meets every constraint by its latest values (never the best otherwise)
};

struct progress_snapshot {
  std::string experiment;
  double elapsed_s = 0;
  std::string metric;
  mode direction = mode::max;
  std::vector<progress_trial> trials;
};

// The table, at most `width` columns wide and `max_rows` trial rows (running trials
// first; the rest counted). Ends with a newline.
std::string render_progress(const progress_snapshot& now, int width = 100, int max_rows = 20);

// Plain lines for a log: what changed between two snapshots.
std::vector<std::string> progress_changes(const progress_snapshot& before, const progress_snapshot& now);

}  // namespace tune
