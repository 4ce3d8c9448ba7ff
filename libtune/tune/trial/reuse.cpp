#include "tune/trial/reuse.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tune/core/json_text.hpp"

extern char** environ;

namespace tune::reuse {

namespace {

// Reads and removes dir/next.json if it is there. nullopt: not there.
expected<std::optional<next_trial>> take_file(const std::string& dir) {
  auto path = dir + "/" + next_file;
  std::ifstream in(path);
  if (!in) return std::optional<next_trial>{};
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path.c_str());
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object() || !j.contains("env") || !j["env"].is_object() || !j.value("cwd", nlohmann::json()).is_string())
    return status{errc::invalid_argument, path + " is not a next trial (a JSON object with \"env\" and \"cwd\")"};
  next_trial n;
  n.cwd = j["cwd"].get<std::string>();
  for (auto& [k, v] : j["env"].items()) {
    if (!v.is_string()) return status{errc::invalid_argument, path + ": the variable " + k + " is not a string"};
    n.env[k] = v.get<std::string>();
  }
  return std::optional<next_trial>{std::move(n)};
}

// The worker's watch on its hand-over folder, kept from one wait to the next: closing
// an inotify instance waits for an RCU grace period (10-20 ms measured), which every
// hand-over paid when each wait made and closed its own.
struct folder_watch {
  int fd = -1;
  std::string dir;
  ~folder_watch() {
    if (fd >= 0) ::close(fd);
  }
  // The watch on `d` (-1: none, then the caller looks every few ms); `gone`: the folder
  // is not there (the node ended the wait).
  int on(const std::string& d, bool& gone) {
    gone = false;
    if (fd >= 0 && dir == d) return fd;
    if (fd >= 0) ::close(fd);
    dir = d;
    fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd >= 0 && ::inotify_add_watch(fd, d.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF) < 0) {
      gone = errno == ENOENT;
      ::close(fd);
      fd = -1;
    }
    return fd;
  }
  void forget() {  // the folder went: a later wait watches anew
    if (fd >= 0) ::close(fd);
    fd = -1;
    dir.clear();
  }
};

}  // namespace

expected<std::optional<next_trial>> wait_for_next(const std::string& dir, std::chrono::milliseconds wait) {
  thread_local folder_watch watch;
  bool missing = false;
  int fd = watch.on(dir, missing);
  if (missing) return std::optional<next_trial>{};  // the node ended the wait
  auto until = std::chrono::steady_clock::now() + wait;
  expected<std::optional<next_trial>> got = std::optional<next_trial>{};
  for (;;) {
    got = take_file(dir);  // after the watch is set: a file written before it is seen here
    if (!got || *got) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (fd < 0) {  // no inotify: look every 5 ms
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno != EINTR) break;
    char buf[4096];
    bool gone = false;
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      for (ssize_t off = 0; off + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
        auto* e = reinterpret_cast<inotify_event*>(buf + off);
        gone = gone || (e->mask & (IN_DELETE_SELF | IN_IGNORED));
        off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    if (gone) {
      watch.forget();
      got = take_file(dir);
      break;
    }
  }
  return got;
}

status apply(const next_trial& n) {
  std::vector<std::string> drop;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    auto name = kv.substr(0, eq);
    if (!n.env.count(name)) drop.push_back(name);
  }
  for (auto& name : drop) ::unsetenv(name.c_str());
  for (auto& [k, v] : n.env) {
    const char* now = std::getenv(k.c_str());
    if (!now || v != now) ::setenv(k.c_str(), v.c_str(), 1);
  }
  if (!n.cwd.empty() && ::chdir(n.cwd.c_str()) != 0)
    return status{errc::invalid_argument, "cannot change to the next trial's folder " + n.cwd + ": " + ::strerror(errno)};
  return status::ok();
}

bool per_trial_variable(const std::string& name) {
  static const std::set<std::string> names{"TUNE_TRIAL_ID", "TUNE_TRIAL_DIR", "TUNE_TRIAL_CONFIG", "TUNE_RESTORE_DIR",
                                           "HOME", "TUNE_REUSE_DIR"};
  return names.count(name) > 0;
}

std::string key_of(const process_spec& spec, const std::string& experiment, const host_limits& limits) {
  nlohmann::json k;
  k["experiment"] = experiment;
  k["argv"] = spec.argv;
  nlohmann::json env = nlohmann::json::object();
  for (auto& [name, value] : spec.env)
    if (!per_trial_variable(name)) env[name] = value;
  // A HOME that is not the trial's own folder (the account's) is part of it.
  if (auto h = spec.env.find("HOME"), d = spec.env.find("TUNE_TRIAL_DIR");
      h != spec.env.end() && (d == spec.env.end() || h->second != d->second))
    env["HOME"] = h->second;
  k["env"] = env;
  k["uid"] = spec.run_as.uid;
  k["gid"] = spec.run_as.gid;
  k["groups"] = spec.run_as.groups;
  k["limits"] = {limits.memory, limits.cpus, limits.pids};
  return json_text(k);
}

status hand_over(const idle_worker& w, const process_spec& spec) {
  auto text = json_text(nlohmann::json{{"env", spec.env}, {"cwd", spec.cwd}});
  // The folder is the worker's account's: what is at the temporary name is never
  // followed (a link the worker put there), the file is made anew or not at all.
  auto tmp = w.dir + "/.next.json.tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return status{errc::inconsistent, "cannot write " + tmp + ": " + ::strerror(errno)};
  if (!write_all(fd, text.data(), text.size())) {
    auto why = std::string{::strerror(errno)};
    ::close(fd);
    ::unlink(tmp.c_str());
    return status{errc::inconsistent, "cannot write " + tmp + ": " + why};
  }
  ::close(fd);
  if (::rename(tmp.c_str(), (w.dir + "/" + next_file).c_str()) != 0)
    return status{errc::inconsistent, "cannot write " + w.dir + "/" + next_file + ": " + ::strerror(errno)};
  return status::ok();
}

idle_pool::idle_pool(std::chrono::milliseconds linger) : linger_(linger), reaper_([this] { reap_loop(); }) {}

idle_pool::~idle_pool() {
  std::vector<idle_worker> all;
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
    all.swap(idle_);
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  for (auto& w : all) end(w);
}

void idle_pool::end(idle_worker& w) {
  std::error_code ec;
  std::filesystem::remove_all(w.dir, ec);  // a waiting worker sees its folder go and exits
  if (w.process) {
    w.process->kill();
    std::vector<std::string> ignored;
    (void)w.process->wait(std::chrono::seconds(5), ignored);
  }
  if (w.cgroup) (void)w.cgroup->end(w.process ? w.process->group() : 0);
  w.process.reset();
  w.cgroup.reset();
}

void idle_pool::keep(idle_worker w) {
  w.until = std::chrono::steady_clock::now() + linger_;
  {
    std::lock_guard lock{mu_};
    if (!stopping_) {
      idle_.push_back(std::move(w));
      cv_.notify_all();
      return;
    }
  }
  end(w);
}

std::optional<idle_worker> idle_pool::take(const std::string& key) {
  std::lock_guard lock{mu_};
  std::optional<idle_worker> out;
  auto best = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it)
    if (it->key == key && it->process && !it->process->try_wait() && (best == idle_.end() || it->until > best->until))
      best = it;
  if (best != idle_.end()) {
    out = std::move(*best);
    idle_.erase(best);
  }
  return out;
}

void idle_pool::evict(const std::string& key, const std::set<std::string>& cards) {
  std::vector<idle_worker> out;
  {
    std::lock_guard lock{mu_};
    for (auto it = idle_.begin(); it != idle_.end();) {
      bool shares = std::any_of(cards.begin(), cards.end(), [&](auto& c) { return it->cards.count(c) > 0; });
      if (shares && it->key != key) {
        out.push_back(std::move(*it));
        it = idle_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : out) end(w);
}

size_t idle_pool::size() {
  std::lock_guard lock{mu_};
  return idle_.size();
}

void idle_pool::reap_loop() {
  std::unique_lock lock{mu_};
  while (!stopping_) {
    auto now = std::chrono::steady_clock::now();
    std::vector<idle_worker> out;
    auto next = now + std::chrono::seconds(1);
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (it->until <= now || !it->process || it->process->try_wait()) {
        out.push_back(std::move(*it));
        it = idle_.erase(it);
      } else {
        next = std::min(next, it->until);
        ++it;
      }
    }
    if (!out.empty()) {
      lock.unlock();
      for (auto& w : out) end(w);
      lock.lock();
      continue;
    }
    // Also every 100 ms: a worker that ended by itself is reaped soon.
    cv_.wait_until(lock, std::min(next, now + std::chrono::milliseconds(100)));
  }
}

}  // namespace tune::reuse
