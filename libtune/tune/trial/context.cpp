#include "tune/trial/context.hpp"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

volatile sig_atomic_t stop_asked = 0;

void on_term(int) { stop_asked = 1; }

std::string env_or(const char* name, const std::string& fallback = {}) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

nlohmann::json parse_config(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_object() ? j : nlohmann::json{};
}

}  // namespace

expected<trial_context> trial_context::make(std::string trial_id, const std::string& config_json,
                                            const std::string& gpus_json, int report_fd) {
  trial_context c;
  c.trial_id_ = std::move(trial_id);
  auto config = nlohmann::json::parse(config_json.empty() ? "{}" : config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return status{errc::invalid_argument, "the trial's configuration is not a JSON object: " + config_json};
  c.config_json_ = json_text(config);
  auto gpus = nlohmann::json::parse(gpus_json.empty() ? "[]" : gpus_json, nullptr, false);
  if (gpus.is_discarded() || !gpus.is_array())
    return status{errc::invalid_argument, "the trial's GPU list is not a JSON list: " + gpus_json};
  try {
    int local = 0;
    for (auto& g : gpus) {
      trial_gpu t;
      t.local = local++;
      t.index = g.value("index", t.local);
      t.uuid = g.at("uuid").get<std::string>();
      t.pci_bus_id = g.value("pci_bus_id", "");
      t.share = g.value("share", 1.0);
      t.memory_quota = g.value("memory_quota", int64_t{0});
      t.logical = g.value("logical", false);
      c.gpus_.push_back(std::move(t));
    }
  } catch (const std::exception& e) {
    return status{errc::invalid_argument, std::string{"the trial's GPU list is malformed: "} + e.what()};
  }
  c.report_fd_ = report_fd;
  return c;
}

expected<trial_context> trial_context::from_environment() {
  auto id = env_or("TUNE_TRIAL_ID");
  if (id.empty())
    return status{errc::invalid_argument,
                  "not running as a libtune trial (no TUNE_TRIAL_ID): trials are started by a node"};
  int fd = -1;
  auto fd_text = env_or("TUNE_REPORT_FD");
  if (!fd_text.empty()) fd = std::atoi(fd_text.c_str());
  auto c = make(id, env_or("TUNE_TRIAL_CONFIG", "{}"), env_or("TUNE_TRIAL_GPUS", "[]"), fd);
  if (!c) return c;
  c->node_id_ = env_or("TUNE_NODE_ID");
  c->trial_dir_ = env_or("TUNE_TRIAL_DIR");
  c->restore_dir_ = env_or("TUNE_RESTORE_DIR");
  watch_stop_signal();
  return c;
}

void trial_context::watch_stop_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_term;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
}

bool trial_context::should_stop() { return stop_asked != 0; }

void trial_context::forget_stop() { stop_asked = 0; }

std::vector<int> trial_context::device_ids() const {
  std::vector<int> ids;
  for (auto& g : gpus_) ids.push_back(g.local);
  return ids;
}

expected<double> trial_context::number(const std::string& key) const {
  auto j = parse_config(config_json_);
  if (!j.contains(key)) return status{errc::not_found, "the trial's configuration has no \"" + key + "\""};
  if (!j[key].is_number()) return status{errc::invalid_argument, "\"" + key + "\" is not a number: " + json_text(j[key])};
  return j[key].get<double>();
}

expected<int64_t> trial_context::integer(const std::string& key) const {
  auto n = number(key);
  if (!n) return n.error();
  if (std::floor(*n) != *n || std::abs(*n) > 9.0e15)
    return status{errc::invalid_argument, "\"" + key + "\" is not a whole number: " + std::to_string(*n)};
  return static_cast<int64_t>(*n);
}

expected<std::string> trial_context::text(const std::string& key) const {
  auto j = parse_config(config_json_);
  if (!j.contains(key)) return status{errc::not_found, "the trial's configuration has no \"" + key + "\""};
  if (!j[key].is_string()) return status{errc::invalid_argument, "\"" + key + "\" is not a string: " + json_text(j[key])};
  return j[key].get<std::string>();
}

expected<double> trial_context::number_or(const std::string& key, double fallback) const {
  auto n = number(key);
  if (!n && n.error().code() == errc::not_found) return fallback;
  return n;
}

expected<int64_t> trial_context::integer_or(const std::string& key, int64_t fallback) const {
  auto n = integer(key);
  if (!n && n.error().code() == errc::not_found) return fallback;
  return n;
}

expected<std::string> trial_context::text_or(const std::string& key, const std::string& fallback) const {
  auto t = text(key);
  if (!t && t.error().code() == errc::not_found) return fallback;
  return t;
}

expected<bool> trial_context::flag_or(const std::string& key, bool fallback) const {
  auto j = parse_config(config_json_);
  if (!j.contains(key)) return fallback;
  const auto& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number() && (v.get<double>() == 0 || v.get<double>() == 1)) return v.get<double>() != 0;
  return status{errc::invalid_argument, "\"" + key + "\" must be true, false, 1 or 0, not " + json_text(v)};
}

status trial_context::write_line(const std::string& line) {
  if (report_fd_ < 0) return status{errc::invalid_argument, "this trial has no report channel (not started by a node)"};
  std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(report_fd_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return status{errc::inconsistent, std::string{"cannot report to the node: "} + ::strerror(errno)};
    off += static_cast<size_t>(n);
  }
  return status::ok();
}

status trial_context::report(const std::map<std::string, double>& metrics, int64_t iteration) {
  if (iteration < 1) return status{errc::invalid_argument, "a result's iteration counts from 1"};
  iteration_ = iteration - 1;
  return report(metrics);
}

status trial_context::report(const std::map<std::string, double>& metrics) {
  nlohmann::json m = nlohmann::json::object();
  for (auto& [k, v] : metrics) {
    if (!std::isfinite(v)) return status{errc::invalid_argument, "metric \"" + k + "\" is not a finite number"};
    m[k] = v;
  }
  return write_line(json_text(nlohmann::json{{"type", "result"}, {"iteration", ++iteration_}, {"metrics", m}}));
}

expected<std::string> trial_context::checkpoint_dir(int64_t iteration) const {
  if (trial_dir_.empty()) return status{errc::invalid_argument, "this trial has no folder (not started by a node)"};
  if (iteration < 0) return status{errc::invalid_argument, "a checkpoint's iteration must not be negative"};
  auto dir = trial_dir_ + "/checkpoints/" + std::to_string(iteration);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return status{errc::invalid_argument, "cannot create " + dir + ": " + ec.message()};
  return dir;
}

status trial_context::report_checkpoint(int64_t iteration) {
  if (iteration < 0) return status{errc::invalid_argument, "a checkpoint's iteration must not be negative"};
  auto rel = "checkpoints/" + std::to_string(iteration);
  if (!trial_dir_.empty() && !std::filesystem::is_directory(trial_dir_ + "/" + rel))
    return status{errc::not_found, "no checkpoint folder " + rel + ": write it with checkpoint_dir() first"};
  return write_line(json_text(nlohmann::json{{"type", "checkpoint"}, {"iteration", iteration}, {"dir", rel}}));
}

status trial_context::done(const std::string& message) {
  return write_line(json_text(nlohmann::json{{"type", "done"}, {"message", message}}));
}

}  // namespace tune
