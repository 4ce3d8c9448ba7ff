#include "tune/trial/program_spawners.hpp"

#include <algorithm>

namespace tune {

namespace {
constexpr int max_spawner_starts = 3;  // a spawner that keeps dying (or refusing) is not started again
}  // namespace

program_spawners::program_spawners(std::map<std::string, std::string> env, size_t max_warm)
    : env_(std::move(env)), max_warm_(std::max<size_t>(1, max_warm)) {}

const std::vector<std::string>& program_spawners::load_time_variables() {
  static const std::vector<std::string> names{
      "LD_LIBRARY_PATH", "LD_PRELOAD",       "LD_AUDIT",         "LD_BIND_NOW",     "GLIBC_TUNABLES", "MALLOC_ARENA_MAX",
      "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_PROC_BIND",  "OMP_PLACES",
      "LANG",            "LC_ALL",           "TZ"};
  return names;
}

std::shared_ptr<spawner> program_spawners::for_spec(const process_spec& spec) {
  if (spec.argv.size() < 3 || spec.argv[1] != "--tune-worker" || spec.env.count("LIBTUNE_FRESH_PROCESS")) return nullptr;
  auto env = env_;
  std::string key = spec.argv[0];
  for (auto& name : load_time_variables()) {
    env.erase(name);
    if (auto v = spec.env.find(name); v != spec.env.end()) {
      env[name] = v->second;
      key += "\n" + name + "=" + v->second;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  recent_.remove(key);
  recent_.push_front(key);
  auto& s = warm_[key];
  if (s && !s->gone()) return s;
  if (starts_[key]++ >= max_spawner_starts) return nullptr;
  auto started = spawner::start_program({spec.argv[0], "--tune-spawner"}, env);
  s = started ? *started : nullptr;
  while (warm_.size() > max_warm_ && !recent_.empty()) {  // the least recently used ends
    warm_.erase(recent_.back());
    recent_.pop_back();
  }
  return s;
}

}  // namespace tune
