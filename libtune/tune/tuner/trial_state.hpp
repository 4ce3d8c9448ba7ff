// A trial's state in the experiment, one enum for the engine, the controller, the store
// and the progress output (stored and shown as its name).
//
//   pending ──start──► running ──► terminated   (ended well, or stopped: its results count)
//                        │  ▲ ──► error        (failed; or ended without the metric)
//                  pause ▼  │ resume
//                       paused ──► terminated  (stopped while paused)
//
// A failed trial started again (max_failures) goes error's way back to running. The
// comparison with a name ("running") keeps code that compared the strings it was.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tune {

enum class trial_state { pending, running, paused, terminated, error };

constexpr std::string_view to_string(trial_state s) {
  switch (s) {
    case trial_state::pending: return "pending";
    case trial_state::running: return "running";
    case trial_state::paused: return "paused";
    case trial_state::terminated: return "terminated";
    case trial_state::error: return "error";
  }
  return "?";
}

// The state with this name; none for anything else.
constexpr std::optional<trial_state> parse_trial_state(std::string_view name) {
  for (auto s : {trial_state::pending, trial_state::running, trial_state::paused, trial_state::terminated,
                 trial_state::error})
    if (to_string(s) == name) return s;
  return std::nullopt;
}

constexpr bool operator==(trial_state s, std::string_view name) { return to_string(s) == name; }

// Ended for good (nothing more will start it).
constexpr bool finished(trial_state s) { return s == trial_state::terminated || s == trial_state::error; }

inline void to_json(nlohmann::json& j, trial_state s) { j = std::string{to_string(s)}; }

inline std::ostream& operator<<(std::ostream& os, trial_state s) { return os << to_string(s); }

}  // namespace tune
