// What a trial's process starts from on this node: its environment, and the folder of
// libtune.so when the loader would not find it.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "node.hpp"

namespace tune {

std::map<std::string, std::string> inherited_trial_env() {
  std::map<std::string, std::string> env;
  for (auto name : {"PATH", "HOME", "LD_LIBRARY_PATH", "TMPDIR", "LANG", "TUNE_FASHION_MNIST_DIR",
                    "TUNE_TRAIN_POOLED_GRADS", "TUNE_TRAIN_DIRECT_CONV", "TUNE_SIMULATED_GPUS"})
    if (const char* v = std::getenv(name)) env[name] = v;
  if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&inherited_trial_env), &info) != 0 && info.dli_fname != nullptr) {
    auto found = env.find("LD_LIBRARY_PATH");
    auto path = trial_library_path(found == env.end() ? nullptr : found->second.c_str(), info.dli_fname);
    if (path) env["LD_LIBRARY_PATH"] = *path;
  }
  return env;
}

std::optional<std::string> trial_library_path(const char* current, const std::string& library) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = fs::weakly_canonical(library, ec);
  if (ec || file.filename().string().rfind("libtune.so", 0) != 0) return std::nullopt;
  auto dir = file.parent_path().string();
  static const std::set<std::string> searched{"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
                                              "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                              "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"};
  if (searched.count(dir)) return std::nullopt;
  std::string now = current ? current : "";
  for (size_t start = 0; start <= now.size();) {
    auto end = now.find(':', start);
    if (end == std::string::npos) end = now.size();
    if (now.compare(start, end - start, dir) == 0 && end - start == dir.size()) return std::nullopt;
    start = end + 1;
  }
  return now.empty() ? dir : now + ":" + dir;
}

}  // namespace tune
