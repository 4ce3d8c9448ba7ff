// Internal: the factories of the schedulers that live in their own files.
#pragma once

#include <memory>
#include <string>

#include "tune/tuner/scheduler.hpp"

namespace tune::detail {

// "<scheduler>: <option> must be <rule>, got <got>" (invalid_argument).
status invalid(const char* scheduler, const std::string& option, const std::string& rule, const std::string& got);

expected<std::unique_ptr<trial_scheduler>> make_hyperband(const hyperband& o, std::string metric, mode m);
expected<std::unique_ptr<trial_scheduler>> make_median(const median_stopping& o, std::string metric, mode m);
expected<std::unique_ptr<trial_scheduler>> make_pbt(const pbt& o, std::string metric, mode m);

}  // namespace tune::detail
