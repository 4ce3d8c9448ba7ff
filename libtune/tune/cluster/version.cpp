#include "tune/cluster/version.hpp"

#include <cstdlib>

namespace tune {

const std::string& version() {
  // LIBTUNE_VERSION_OVERRIDE lets the tests run a process that claims another version,
  // to check that mismatched versions are refused; nothing else should set it.
  static const std::string v = [] {
    const char* o = std::getenv("LIBTUNE_VERSION_OVERRIDE");
    return std::string{o && *o ? o : LIBTUNE_VERSION};
  }();
  return v;
}

}  // namespace tune
