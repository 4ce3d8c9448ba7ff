#include "tune/trial/mps.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "tune/trial/process.hpp"

namespace tune {

namespace {

// A program by name along PATH (worker_process runs paths only).
std::string find_program(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return name;
  size_t from = 0;
  while (from <= path.size()) {
    auto to = path.find(':', from);
    if (to == std::string::npos) to = path.size();
    auto candidate = path.substr(from, to - from) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    from = to + 1;
  }
  return "";
}

}  // namespace

std::string mps_daemon::memory_limits(const std::vector<int64_t>& quotas) {
  std::string out;
  for (size_t i = 0; i < quotas.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(i) + "=" + std::to_string(quotas[i] >> 20) + "M";
  }
  return out;
}

expected<std::unique_ptr<mps_daemon>> mps_daemon::start(const std::string& dir, const std::vector<std::string>& cards,
                                                        std::map<std::string, std::string> env,
                                                        const std::string& program) {
  if (cards.empty()) return status{errc::invalid_argument, "MPS needs at least one real GPU"};
  std::unique_ptr<mps_daemon> d{new mps_daemon};
  d->pipe_dir_ = dir + "/pipe";
  d->log_dir_ = dir + "/log";
  std::error_code ec;
  for (auto& f : {d->pipe_dir_, d->log_dir_}) {
    std::filesystem::create_directories(f, ec);
    if (ec) return status{errc::invalid_argument, "cannot create " + f + ": " + ec.message()};
  }
  d->program_ = find_program(program, env.count("PATH") ? env["PATH"] : "/usr/local/bin:/usr/bin:/bin");
  if (d->program_.empty())
    return status{errc::not_found, program + " is not on the PATH: CUDA MPS comes with the NVIDIA driver"};
  std::string visible;
  for (auto& c : cards) visible += (visible.empty() ? "" : ",") + c;
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["CUDA_VISIBLE_DEVICES"] = visible;
  env["CUDA_MPS_PIPE_DIRECTORY"] = d->pipe_dir_;
  env["CUDA_MPS_LOG_DIRECTORY"] = d->log_dir_;
  d->env_ = env;
  // The thread that starts the daemon owns it (its death signal is tied to it) and
  // drains its output until asked to stop.
  auto started_p = std::make_shared<std::promise<status>>();
  auto ready = started_p->get_future();
  d->thread_ = std::thread([raw = d.get(), started_p] {
    auto& started = *started_p;
    auto p = worker_process::start({{raw->program_, "-f"}, raw->env_, ""});
    if (!p) {
      started.set_value(p.error());
      return;
    }
    raw->pid_ = (*p)->pid();
    std::string control = raw->pipe_dir_ + "/control";
    std::vector<std::string> ignored;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool told = false;
    for (;;) {
      // poll() returns at once when the daemon has closed its output: sleep instead.
      if (!(*p)->poll(std::chrono::milliseconds(50), ignored)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ignored.clear();
      if (auto e = (*p)->try_wait()) {
        if (!told)
          started.set_value(status{errc::invalid_argument, "nvidia-cuda-mps-control ended with " + e->describe() + ": " +
                                                               (*p)->stderr_tail() + (*p)->stdout_tail()});
        return;
      }
      if (!told) {
        struct stat st {};
        if (::stat(control.c_str(), &st) == 0) {
          told = true;
          started.set_value(status::ok());
        } else if (std::chrono::steady_clock::now() > deadline) {
          told = true;
          started.set_value(status{errc::invalid_argument, "nvidia-cuda-mps-control did not listen within 10 s: " +
                                                               (*p)->stderr_tail()});
          (*p)->kill();
        }
      }
      if (raw->stop_) {
        // SIGTERM to its group (the daemon and the servers it started), SIGKILL after 5 s.
        (*p)->terminate();
        std::vector<std::string> rest;
        if (!(*p)->wait(std::chrono::seconds(5), rest)) (*p)->kill();
        return;
      }
    }
  });
  auto st = ready.get();
  if (!st) {
    d->stop_ = true;
    return st;
  }
  return d;
}

mps_daemon::~mps_daemon() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::map<std::string, std::string> mps_daemon::client_env() const {
  return {{"CUDA_MPS_PIPE_DIRECTORY", pipe_dir_}, {"CUDA_MPS_LOG_DIRECTORY", log_dir_}};
}

}  // namespace tune
