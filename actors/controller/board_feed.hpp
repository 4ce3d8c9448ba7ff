// What an experiment's controller tells the head's board (tune/cluster/board.hpp) for
// the dashboard: the trials whose state, iteration, value or whereabouts changed, the
// new points of every trial's learning curve (the experiment's metric), and each
// trial's latest result. The controller asks for a report twice a second; the first
// one, and the first after a head restart (the new head's board is empty), is full.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tune/cluster/board.hpp"
#include "tune/tuner/engine.hpp"

namespace tune {

class board_feed {
 public:
  // `info`: what the board shows of the experiment (name, metric, mode, dir, host, pid;
  // objectives and constraints when it has several or any).
  board_feed(std::string experiment_id, nlohmann::json info, size_t max_points = 512);

  // The board's id of the experiment in `dir` on `host` (the same when it is resumed).
  static std::string experiment_id(const std::string& host, const std::string& dir);

  void point(const std::string& trial, int64_t iteration, double value);
  void last_result(const std::string& trial, std::string metrics_json);
  // Where it runs: node, pid, gpus, group, trial_dir (merged into what it had).
  void where(const std::string& trial, const nlohmann::json& info);
  void resend_all() { full_ = true; }
  // An experiment-wide field (auto_packing): in the next report, and in every full one.
  void set_info(const std::string& key, nlohmann::json value);

  // The report of what changed since the last one (everything when full); null when
  // nothing did. `state`: running, done or failed.
  nlohmann::json report(const std::map<std::string, engine_trial>& trials, const std::string& state,
                        const std::string& error, double elapsed_s, int64_t results);

 private:
  struct trial {
    bounded_series curve;
    std::vector<std::pair<int64_t, double>> unsent{};
    nlohmann::json where = nlohmann::json::object();
    uint64_t where_version = 0;
    // What the board's row was built from (rows are built again only when it changes).
    struct key {
      trial_state state = trial_state::pending;
      std::string error;
      int64_t iteration = 0, checkpoint = 0;
      std::optional<double> value;
      std::vector<std::optional<double>> others;
      int starts = 0, failures = 0;
      uint64_t where_version = 0;
      bool operator==(const key&) const = default;
    };
    std::optional<key> sent{};
    std::string last{};
    bool last_dirty = false;
  };
  trial& of(const std::string& id);

  std::string id_;
  nlohmann::json info_;
  nlohmann::json info_changed_ = nlohmann::json::object();  // set_info's since the last report
  size_t max_points_;
  std::map<std::string, trial> trials_;
  bool full_ = true;
  std::string sent_state_;
  int64_t sent_results_ = -1;
};

}  // namespace tune
