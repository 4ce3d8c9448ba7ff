#include "trackers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "tune/core/json_text.hpp"
#include "tune/trial/python_module.hpp"

extern char** environ;

namespace tune {

namespace {

// Queued lines beyond this are results dropped (said once): the bridge fell behind.
constexpr size_t max_queued_bytes = size_t{256} << 20;

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    auto n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

std::string tracker_names(const tracker_setup& s) {
  std::string out;
  if (!s.mlflow.is_null()) out = "MLflow";
  if (!s.wandb.is_null()) out += (out.empty() ? "" : ", ") + std::string{"Weights & Biases"};
  return out;
}

namespace {

struct bridge_process {
  pid_t pid = -1;
  int in = -1, out = -1;  // its standard input (we write), output (we read)
};

// Runs `python -m libtune.integrations._bridge` with the package (in `pythonpath`) first
// on its PYTHONPATH, its standard error to `log`; the error is posix_spawn's.
expected<bridge_process> spawn_bridge(const std::string& python, const std::string& pythonpath, const std::string& log_path) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return status{errc::insufficient, std::string{"a pipe: "} + std::strerror(errno)};
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return status{errc::insufficient, std::string{"a pipe: "} + std::strerror(errno)};
  }
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  if (log >= 0) posix_spawn_file_actions_adddup2(&fa, log, 2);
  // Its environment: ours, with the package first on PYTHONPATH; unbuffered; W&B quiet.
  std::vector<std::string> env;
  std::string path = pythonpath;
  for (char** e = environ; *e; ++e) {
    std::string_view v{*e};
    if (v.starts_with("PYTHONPATH=")) {
      if (v.size() > 11) path += ":" + std::string{v.substr(11)};
    } else if (!v.starts_with("PYTHONUNBUFFERED=")) {
      env.emplace_back(v);
    }
  }
  env.push_back("PYTHONPATH=" + path);
  env.push_back("PYTHONUNBUFFERED=1");
  if (!std::getenv("WANDB_SILENT")) env.push_back("WANDB_SILENT=true");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args{python, "-m", "libtune.integrations._bridge"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  bridge_process p;
  int rc = posix_spawnp(&p.pid, python.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (log >= 0) ::close(log);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return status{errc::not_found, std::strerror(rc)};
  }
  p.in = in[1];
  p.out = out[0];
  return p;
}

}  // namespace

std::shared_ptr<tracker_sink> tracker_sink::start(tracker_setup setup) {
  std::shared_ptr<tracker_sink> sink{new tracker_sink(std::move(setup))};
  auto& s = sink->setup_;
  auto names = tracker_names(s);
  auto folder = s.experiment_dir + "/trackers";
  auto installed = install_python_module(folder + "/python");
  if (!installed) {
    sink->warn(names + ": cannot write the trackers' bridge: " + installed.error().message() + "; no runs are logged");
    return sink;
  }
  auto bridge = spawn_bridge(s.python, *installed, folder + "/bridge.log");
  if (!bridge) {
    sink->warn(names + ": cannot run the Python they need, " + s.python + ": " + bridge.error().message() +
               " (set tracker_python to an interpreter that has " + (s.mlflow.is_null() ? "wandb" : "mlflow") +
               " installed); no runs are logged");
    return sink;
  }
  sink->pid_ = bridge->pid;
  sink->in_ = bridge->in;
  sink->out_ = bridge->out;
  nlohmann::json trackers = nlohmann::json::array();
  if (!s.mlflow.is_null()) trackers.push_back({{"type", "mlflow"}, {"options", s.mlflow}});
  if (!s.wandb.is_null()) trackers.push_back({{"type", "wandb"}, {"options", s.wandb}});
  sink->send(json_text({{"op", "setup"}, {"experiment", s.experiment}, {"dir", s.experiment_dir},
                        {"key", s.run_key}, {"trackers", trackers}}));
  sink->writer_ = std::thread([p = sink.get()] { p->write_loop(); });
  sink->reader_ = std::thread([p = sink.get()] { p->read_loop(); });
  return sink;
}

tracker_sink::~tracker_sink() {
  if (pid_ > 0) stop_child();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void tracker_sink::send(std::string line, bool droppable) {
  if (pid_ <= 0) return;
  line += '\n';
  {
    std::lock_guard lock{m_};
    if (closing_) return;
    if (droppable && queued_bytes_ + line.size() > max_queued_bytes) {
      if (!dropped_) heard_.push_back(tracker_names(setup_) + ": the trackers fall behind (over 256 MiB of results "
                                                               "queued): results are dropped until they catch up");
      dropped_ = true;
      return;
    }
    queued_bytes_ += line.size();
    queue_.push_back(std::move(line));
  }
  cv_.notify_one();
}

void tracker_sink::write_loop() {
  // A bridge that died must not kill this process with SIGPIPE: blocked here, so a write
  // to it fails with EPIPE instead (the pending signal is taken back).
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
  bool broken = false;
  while (true) {
    std::deque<std::string> batch;
    bool closing;
    {
      std::unique_lock lock{m_};
      cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      batch.swap(queue_);
      queued_bytes_ = 0;
      dropped_ = false;
      closing = closing_;
    }
    std::string chunk;
    for (auto& line : batch) {
      chunk += line;
      if (chunk.size() < (1 << 16) && &line != &batch.back()) continue;
      if (!broken && !write_all(in_, chunk)) {
        broken = true;
        timespec zero{0, 0};
        sigtimedwait(&pipe_set, nullptr, &zero);
      }
      chunk.clear();
    }
    if (closing) break;
  }
  ::close(in_);
}

void tracker_sink::read_loop() {
  std::string buf;
  char chunk[65536];
  while (true) {
    auto n = ::read(out_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1)) {
      auto j = parse_json(std::string_view{buf}.substr(0, nl));
      if (!j.is_object()) continue;
      std::lock_guard lock{m_};
      if (auto w = j.find("warning"); w != j.end() && w->is_string()) heard_.push_back(w->get<std::string>());
      if (auto r = j.find("run"); r != j.end() && r->is_object())
        links_.push_back({r->value("trial", ""), r->value("tracker", ""), r->value("id", ""), r->value("url", "")});
    }
  }
  ::close(out_);
}

void tracker_sink::started(const std::string& trial, const nlohmann::json& config, double) {
  if (pid_ <= 0) return;
  auto& id = ids_[trial];
  if (id.empty()) id = json_text(nlohmann::json(trial));
  send("{\"op\":\"start\",\"trial\":" + id + ",\"config\":" + json_text(config) + "}");
}

void tracker_sink::result(const std::string& trial, const logged_result& r) {
  if (pid_ <= 0) return;
  auto& id = ids_[trial];
  if (id.empty()) id = json_text(nlohmann::json(trial));
  char time[32];
  std::snprintf(time, sizeof time, "%.6f", r.time);
  send("{\"op\":\"result\",\"trial\":" + id + ",\"iteration\":" + std::to_string(r.iteration) + ",\"time\":" + time +
           ",\"metrics\":" + std::string{r.metrics_json} + "}",
       true);
}

void tracker_sink::checkpoint(const std::string& trial, int64_t iteration, const std::string& folder) {
  send(json_text({{"op", "checkpoint"}, {"trial", trial}, {"iteration", iteration}, {"path", folder}}));
}

void tracker_sink::ended(const std::string& trial, trial_state state, const std::string& error, double) {
  send(json_text({{"op", "end"}, {"trial", trial}, {"state", to_string(state)}, {"error", error}}));
}

void tracker_sink::flush() {
  std::vector<std::string> heard;
  {
    std::lock_guard lock{m_};
    heard.swap(heard_);
  }
  for (auto& w : heard) warn(std::move(w));
}

std::vector<trial_link> tracker_sink::take_links() {
  std::lock_guard lock{m_};
  return std::exchange(links_, {});
}

void tracker_sink::experiment_ended(const std::string& best, double) {
  if (pid_ <= 0) return;
  if (!best.empty()) send(json_text({{"op", "best"}, {"trial", best}}));
  send("{\"op\":\"close\"}");
  {
    std::lock_guard lock{m_};
    closing_ = true;
  }
  cv_.notify_one();
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  bool said = false;
  int wstatus = 0;
  while (true) {
    auto r = ::waitpid(pid_, &wstatus, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    auto waited = std::chrono::duration<double>(clock::now() - t0).count();
    if (!said && waited > 2) {
      std::cerr << "tune: waiting for the trackers (" << tracker_names(setup_) << ") to finish writing...\n";
      said = true;
    }
    if (waited > setup_.close_timeout_s) {
      warn(tracker_names(setup_) + ": the trackers did not finish writing within " +
           std::to_string(static_cast<int>(setup_.close_timeout_s)) + " s; stopped (see " + setup_.experiment_dir +
           "/trackers/bridge.log)");
      stop_child();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (pid_ > 0 && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0)
    warn(tracker_names(setup_) + ": the trackers' bridge exited with " + std::to_string(WEXITSTATUS(wstatus)) +
         " (see " + setup_.experiment_dir + "/trackers/bridge.log)");
  pid_ = -1;
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  flush();
}

void tracker_sink::stop_child() {
  {
    std::lock_guard lock{m_};
    closing_ = true;
  }
  cv_.notify_one();
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 250; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace tune
