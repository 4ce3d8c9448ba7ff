// The wall clock as seconds since the Unix epoch (what the store and the dashboard keep).
#pragma once

#include <chrono>

namespace tune {

inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace tune
