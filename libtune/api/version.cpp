// libtune.so's own source: its version (tune/version.hpp, generated from version.hpp.in).
#include "tune/version.hpp"

namespace tune {

const char* library_version() noexcept { return LIBTUNE_VERSION; }

}  // namespace tune
