#include "tune/cluster/version.hpp"

namespace tune {

const std::string& version() {
  static const std::string v = LIBTUNE_VERSION;
  return v;
}

}  // namespace tune
