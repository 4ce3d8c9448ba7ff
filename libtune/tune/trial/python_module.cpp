#include "tune/trial/python_module.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

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
  std::set<fs::path> ours;
  for (const auto& file : python_module_files()) {
    auto path = pkg / file.path;
    fs::create_directories(path.parent_path(), ec);
    if (ec) return status{errc::invalid_argument, "cannot create " + path.parent_path().string() + ": " + ec.message()};
    if (auto s = write_atomically(path, file.text); !s) return s;
    ours.insert(path);
  }
  // What an older version wrote and this one has not: an import must not find it.
  for (auto it = fs::recursive_directory_iterator(pkg, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".py" && !ours.count(it->path())) fs::remove(it->path(), ec);
  if (auto s = write_atomically(fs::path(dir) / "_libtune_spawner.py", python_spawner_source()); !s) return s;
  return fs::path(dir).string();
}

}  // namespace tune
