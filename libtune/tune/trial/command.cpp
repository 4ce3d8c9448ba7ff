#include "tune/trial/command.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

// Walks `arg`, calling `literal` with text and `name` with each placeholder's name.
template <class Literal, class Name>
status scan(const std::string& arg, Literal&& literal, Name&& name) {
  size_t at = 0;
  while (at < arg.size()) {
    auto p = arg.find('$', at);
    if (p == std::string::npos) {
      literal(arg.substr(at));
      break;
    }
    literal(arg.substr(at, p - at));
    if (arg.compare(p, 3, "$${") == 0) {  // an escaped "${"
      literal("${");
      at = p + 3;
    } else if (arg.compare(p, 2, "${") == 0) {
      auto end = arg.find('}', p + 2);
      if (end == std::string::npos)
        return status{errc::invalid_argument, "the argument \"" + arg + "\" has a \"${\" without its \"}\" (write $${ for a literal ${)"};
      auto key = arg.substr(p + 2, end - p - 2);
      if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
        return status{errc::invalid_argument, "the argument \"" + arg + "\" has a placeholder with no parameter name: \"${" +
                                                  key + "}\" (write ${lr}, or ${model.depth} for a nested one)"};
      if (auto s = name(key); !s) return s;
      at = end + 1;
    } else {
      literal("$");
      at = p + 1;
    }
  }
  return status::ok();
}

std::string as_argument(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "";
  return json_text(v);
}

std::string keys_of(const nlohmann::json& config) {
  std::string out;
  for (auto& [k, v] : config.items()) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "none" : out;
}

void append_pairs(const nlohmann::json& config, const std::string& prefix, std::vector<std::string>& out) {
  for (auto& [k, v] : config.items()) {
    if (v.is_object() && !v.empty()) {
      append_pairs(v, prefix + k + ".", out);
      continue;
    }
    out.push_back("--" + prefix + k);
    out.push_back(as_argument(v));
  }
}

bool executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

expected<std::vector<std::string>> command_placeholders(const std::vector<std::string>& argv) {
  std::vector<std::string> names;
  for (auto& a : argv)
    if (auto s = scan(a, [](const std::string&) {}, [&](const std::string& k) { names.push_back(k); return status::ok(); }); !s)
      return s;
  return names;
}

expected<std::string> config_argument(const nlohmann::json& config, const std::string& dotted) {
  const nlohmann::json* at = &config;
  std::string part, seen;
  std::istringstream in(dotted);
  while (std::getline(in, part, '.')) {
    if (!at->is_object() || !at->contains(part))
      return status{errc::invalid_argument, "the command names ${" + dotted + "}, but the configuration has no " +
                                                (seen.empty() ? "\"" + part + "\"" : "\"" + part + "\" in " + seen) +
                                                " (it has: " + keys_of(at->is_object() ? *at : nlohmann::json::object()) + ")"};
    at = &(*at)[part];
    seen += (seen.empty() ? "" : ".") + part;
  }
  return as_argument(*at);
}

expected<std::vector<std::string>> render_command(const std::vector<std::string>& argv, const nlohmann::json& config,
                                                  config_args args) {
  std::vector<std::string> out;
  for (auto& a : argv) {
    std::string built;
    auto s = scan(a, [&](const std::string& text) { built += text; },
                  [&](const std::string& key) -> status {
                    auto v = config_argument(config, key);
                    if (!v) return v.error();
                    built += *v;
                    return status::ok();
                  });
    if (!s) return s;
    out.push_back(std::move(built));
  }
  if (args == config_args::append && config.is_object()) append_pairs(config, "", out);
  return out;
}

expected<std::string> resolve_program(const std::string& name, const std::string& cwd, const std::string& path) {
  namespace fs = std::filesystem;
  if (name.empty()) return status{errc::invalid_argument, "the command is empty"};
  if (name.find('/') != std::string::npos) {
    auto p = fs::path(name).is_absolute() ? fs::path(name) : fs::path(cwd) / name;
    std::error_code ec;
    if (!fs::exists(p, ec))
      return status{errc::not_found, "the command's program " + name + " does not exist" +
                                         (fs::path(name).is_absolute() ? std::string{} : " in the working directory " + cwd)};
    if (!executable_file(p.string()))
      return status{errc::invalid_argument, "the command's program " + name + " is not an executable file (chmod +x it, or "
                                            "run it with its interpreter: [python3, " + name + "])"};
    return p.lexically_normal().string();
  }
  std::istringstream in(path);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    auto base = dir.empty() ? fs::path(cwd) : fs::path(dir).is_absolute() ? fs::path(dir) : fs::path(cwd) / dir;
    auto p = (base / name).string();
    if (executable_file(p)) return p;
  }
  return status{errc::not_found, "command '" + name + "' not found on PATH=" + path +
                                     " (the trial's PATH: set PATH in the experiment's env, or give the program's absolute path)"};
}

status check_env_name(const std::string& name) {
  bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
            std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok)
    return status{errc::invalid_argument, "\"" + name + "\" is not an environment variable's name (letters, digits and _)"};
  static const char* const reserved[] = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MPS_PIPE_DIRECTORY",
                                         "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "TUNE_TRIAL_ID",
                                         "TUNE_NODE_ID", "TUNE_TRIAL_DIR", "TUNE_TRIAL_CONFIG", "TUNE_TRIAL_GPUS",
                                         "TUNE_REPORT_FD", "TUNE_RESTORE_DIR", "TUNE_GPU_MEMORY_QUOTA"};
  for (auto r : reserved)
    if (name == r)
      return status{errc::invalid_argument, name + " is set by libtune for each trial (its cards, its folder, its "
                                            "report channel); leave it out of the experiment's env"};
  return status::ok();
}

}  // namespace tune
