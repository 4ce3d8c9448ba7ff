#include "tune/trial/python_module.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tune {

namespace {

status write_atomically(const std::filesystem::path& path, const char* text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto tmp = path.string() + "." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return status{errc::invalid_argument, "cannot write " + tmp};
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return status{errc::invalid_argument, "cannot write " + path.string() + ": " + ec.message()};
  }
  return status::ok();
}

}  // namespace

expected<std::string> install_python_module(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto pkg = fs::path(dir) / "libtune";
  fs::create_directories(pkg, ec);
  if (ec) return status{errc::invalid_argument, "cannot create " + pkg.string() + ": " + ec.message()};
  if (auto s = write_atomically(pkg / "__init__.py", python_module_source()); !s) return s;
  if (auto s = write_atomically(fs::path(dir) / "_libtune_spawner.py", python_spawner_source()); !s) return s;
  return fs::path(dir).string();
}

}  // namespace tune
