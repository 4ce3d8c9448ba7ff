#include "tune/trial/python_module.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tune {

expected<std::string> install_python_module(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto pkg = fs::path(dir) / "libtune";
  fs::create_directories(pkg, ec);
  if (ec) return status{errc::invalid_argument, "cannot create " + pkg.string() + ": " + ec.message()};
  auto tmp = pkg / ("__init__.py." + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << python_module_source();
    if (!out) return status{errc::invalid_argument, "cannot write " + tmp.string()};
  }
  fs::rename(tmp, pkg / "__init__.py", ec);
  if (ec) {
    fs::remove(tmp, ec);
    return status{errc::invalid_argument, "cannot write " + (pkg / "__init__.py").string() + ": " + ec.message()};
  }
  return fs::path(dir).string();
}

}  // namespace tune
