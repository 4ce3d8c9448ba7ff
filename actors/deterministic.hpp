// The configuration of the actors' tests on CAF's deterministic scheduler (no network;
// the test steps the scheduler and time itself).
#pragma once

#include "wire.hpp"

namespace tune {

struct deterministic_config : wire::config {
  deterministic_config() : wire::config(false) { set("scheduler.policy", caf::atom("testing")); }
};

}  // namespace tune
