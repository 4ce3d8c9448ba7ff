#include "tune/trial/python_spawners.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

namespace tune {

namespace {
constexpr int max_interpreter_starts = 3;  // a warm interpreter that keeps dying is not started again
}  // namespace

python_spawners::python_spawners(std::string module_dir, std::map<std::string, std::string> env)
    : module_dir_(std::move(module_dir)), env_(std::move(env)) {
  env_["PYTHONPATH"] = module_dir_;
}

bool python_spawners::is_python(const std::string& program) {
  static const std::regex name{R"(python[0-9.]*)"};
  if (!std::regex_match(std::filesystem::path(program).filename().string(), name)) return false;
  std::error_code ec;
  auto real = std::filesystem::canonical(program, ec);
  if (ec) return false;
  int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  bool elf = ::read(fd, magic, 4) == 4 && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
  ::close(fd);
  return elf;
}

std::shared_ptr<spawner> python_spawners::for_program(const std::string& program) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto known = pythonic_.find(program);
    if (known == pythonic_.end()) known = pythonic_.emplace(program, is_python(program)).first;
    if (!known->second) return nullptr;
  }
  // By the path the command names it by, not the file it links to: a venv's python3 is
  // a link to the system's interpreter but knows its venv by its own path.
  auto key = std::filesystem::absolute(program).lexically_normal().string();
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = warm_[key];
  if (s && !s->gone()) return s;
  if (starts_[key]++ >= max_interpreter_starts) return nullptr;
  // The padding is room for its forks to show their own command lines (python_spawner.py).
  auto started = spawner::start_program({program, module_dir_ + "/_libtune_spawner.py", std::string(4096, ' ')}, env_);
  s = started ? *started : nullptr;
  return s;
}

}  // namespace tune
