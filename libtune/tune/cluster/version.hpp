// libtune's version ("0.1.0"): every process of a cluster must run the same one.
#pragma once

#include <string>

namespace tune {

const std::string& version();

}  // namespace tune
