#include "tune/trial/cgroup.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace tune {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

status write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return {errc::invalid_argument, path + ": " + ::strerror(errno)};
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return {errc::invalid_argument, "writing \"" + text + "\" to " + path + ": " + ::strerror(e)};
  return status::ok();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

int64_t read_number(const std::string& path) {
  auto t = read_text(path);
  if (!t) return -1;
  try {
    return std::stoll(*t);
  } catch (...) {
    return -1;
  }
}

// "key value" lines (memory.events, cpu.stat, memory.oom_control): the value of `key`.
int64_t read_key(const std::string& path, const std::string& key) {
  auto t = read_text(path);
  if (!t) return -1;
  std::istringstream in(*t);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return -1;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

struct mount_entry {
  std::string root, point, fstype;
  std::vector<std::string> options;  // the super block's options
};

std::vector<mount_entry> mounts() {
  std::vector<mount_entry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, source, super;
    mount_entry m;
    if (!(head >> id >> parent >> dev >> root >> point) || !(tail >> m.fstype >> source >> super)) continue;
    m.root = root;
    m.point = point;
    m.options = split(super, ',');
    out.push_back(std::move(m));
  }
  return out;
}

// /proc/<pid>/cgroup: hierarchy lines "id:controllers:path".
std::map<std::string, std::string> cgroups_of(const std::string& pid) {
  std::map<std::string, std::string> out;  // "" for v2, else each controller name
  std::ifstream in("/proc/" + pid + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    auto controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) out[""] = path;
    for (auto& c : split(controllers, ',')) out[c] = path;
  }
  return out;
}

std::set<std::string> words(const std::string& path) {
  std::set<std::string> out;
  if (auto t = read_text(path)) {
    std::istringstream in(*t);
    std::string w;
    while (in >> w) out.insert(w);
  }
  return out;
}

std::vector<int> procs(const std::string& dir) {
  std::vector<int> out;
  if (auto t = read_text(dir + "/cgroup.procs")) {
    std::istringstream in(*t);
    int p;
    while (in >> p) out.push_back(p);
  }
  return out;
}

bool descends_from(int pid, int ancestor) {
  for (int hops = 0; pid > 1 && hops < 64; ++hops) {
    if (pid == ancestor) return true;
    int ppid = 0, pgid = 0;
    std::string name;
    if (!read_proc_stat(pid, ppid, pgid, &name)) return false;
    pid = ppid;
  }
  return false;
}

// Enables the controllers `want` (those the cgroup may have) for its children; which it has then.
std::set<std::string> enable(const std::string& dir, const std::set<std::string>& want) {
  auto have = words(dir + "/cgroup.controllers");
  for (auto& c : want)
    if (have.count(c)) write_text(dir + "/cgroup.subtree_control", "+" + c);  // one at a time: one may fail alone
  return words(dir + "/cgroup.subtree_control");
}

// Kills everything in a v2 cgroup and its children and removes them, deepest first.
// False when something could not be emptied or removed within `timeout`.
bool kill_and_remove(const std::string& dir, std::chrono::milliseconds timeout) {
  if (!exists(dir)) return true;
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> kids;
    while (auto* e = ::readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') kids.push_back(e->d_name);
    ::closedir(d);
    for (auto& k : kids) kill_and_remove(dir + "/" + k, timeout);
  }
  if (exists(dir + "/cgroup.kill")) {
    write_text(dir + "/cgroup.kill", "1");
  } else {  // a v1 cgroup: its tasks one by one
    for (int p : procs(dir)) ::kill(p, SIGKILL);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) return false;
    if (!exists(dir + "/cgroup.kill"))
      for (int p : procs(dir)) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

std::string node_folder(const std::string& name) {
  std::string clean;
  for (char c : name) clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  if (clean.empty()) clean = "node";
  return clean + "." + std::to_string(::getpid());
}

bool pid_alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// "name.PID" -> PID (0 when it does not end so).
int folder_pid(const std::string& folder) {
  auto dot = folder.rfind('.');
  if (dot == std::string::npos || dot + 1 == folder.size()) return 0;
  for (size_t i = dot + 1; i < folder.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(folder[i]))) return 0;
  return std::atoi(folder.c_str() + dot + 1);
}

std::vector<std::string> subfolders(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

std::string human_bytes(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1 << 30));
  else std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

}  // namespace

std::string containment_caps::describe() const {
  if (!cgroup) return "subreaper (" + how + "): every process a trial starts is killed at its end; host memory, CPU and process limits are not enforced";
  std::string limits;
  auto add = [&](bool on, const char* name, const std::string& via) {
    if (on) limits += std::string{limits.empty() ? "" : ", "} + name + (via == "cgroup v1" ? " (v1)" : "");
  };
  add(memory, "memory", memory_via);
  add(cpu, "cpu", cpu_via);
  add(pids, "pids", pids_via);
  std::string missing;
  for (auto [on, name] : {std::pair{memory, "memory"}, {cpu, "cpu"}, {pids, "pids"}})
    if (!on) missing += std::string{missing.empty() ? "" : ", "} + name;
  return "cgroup v2 (" + how + ", " + root + "): " + (limits.empty() ? "no" : limits) + " limits enforced" +
         (missing.empty() ? "" : "; not enforced: " + missing);
}

bool read_proc_stat(int pid, int& ppid, int& pgid, std::string* name) {
  auto t = read_text("/proc/" + std::to_string(pid) + "/stat");
  if (!t) return false;
  auto open = t->find('('), close = t->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  if (name) *name = t->substr(open + 1, close - open - 1);
  std::istringstream rest(t->substr(close + 1));
  char state = 0;
  return static_cast<bool>(rest >> state >> ppid >> pgid);
}

std::string cgroup_of(int pid) {
  auto all = cgroups_of(std::to_string(pid));
  auto it = all.find("");
  return it == all.end() ? "" : it->second;
}

expected<std::shared_ptr<containment>> containment::open(const std::string& mode, const std::string& name,
                                                         const std::vector<std::string>& require,
                                                         const std::string& cgroup_root) {
  if (mode != "auto" && mode != "cgroup" && mode != "subreaper")
    return status{errc::invalid_argument, "containment \"" + mode + "\": use auto, cgroup or subreaper"};
  for (auto& r : require)
    if (r != "memory" && r != "cpu" && r != "pids")
      return status{errc::invalid_argument, "a limit to require is memory, cpu or pids, not \"" + r + "\""};
  std::shared_ptr<containment> c{new containment};
  auto& caps = c->caps_;
  auto no_cgroups = [&](const std::string& why) -> expected<std::shared_ptr<containment>> {
    if (mode == "cgroup")
      return status{errc::invalid_argument, "no cgroups for trials: " + why +
                                                ". Run the node as root or under systemd with Delegate=yes (deploy/systemd), "
                                                "or start it with --containment subreaper"};
    caps = containment_caps{};
    caps.how = why;
    if (!require.empty())
      return status{errc::invalid_argument, "this node cannot enforce host " + require.front() + " limits: " + why +
                                                ". Run it as root or under systemd with Delegate=yes, or leave " +
                                                require.front() + " out of --require-limits"};
    return c;
  };
  if (mode == "subreaper") return no_cgroups("asked for with --containment subreaper");

  // The cgroup2 mount, and this process's cgroup in it.
  auto all_mounts = mounts();
  if (cgroup_root.empty()) {
    for (auto& m : all_mounts)
      if (m.fstype == "cgroup2") {
        c->mount_ = m.point;
        c->mount_root_ = m.root;
        break;
      }
  } else {
    c->mount_ = cgroup_root;
    c->mount_root_ = "/";
  }
  if (c->mount_.empty()) return no_cgroups("no cgroup2 file system is mounted (cgroup v1 only)");
  auto mine = cgroups_of("self");
  if (!mine.count("")) return no_cgroups("this process is in no cgroup v2");
  std::string own = mine[""];
  std::string rel = own;
  if (c->mount_root_ != "/" && rel.compare(0, c->mount_root_.size(), c->mount_root_) == 0) rel = rel.substr(c->mount_root_.size());
  std::string own_dir = c->mount_ + (rel == "/" ? "" : rel);
  if (!exists(own_dir + "/cgroup.procs")) return no_cgroups("its own cgroup " + own + " is not under " + c->mount_);
  const std::set<std::string> wanted{"memory", "cpu", "pids"};
  std::string node_dir;
  std::set<std::string> v2;
  // 1. Delegated: its cgroup holds only this process and its own children (a systemd unit
  //    with Delegate=yes, a Slurm step): it moves them into a leaf, "node", and makes its
  //    trials' cgroups beside it.
  bool alone = rel != "/" && ::access((own_dir + "/cgroup.subtree_control").c_str(), W_OK) == 0;
  if (alone) {
    for (int p : procs(own_dir))
      if (!descends_from(p, ::getpid())) alone = false;
  }
  if (alone && (::mkdir((own_dir + "/node").c_str(), 0755) == 0 || errno == EEXIST)) {
    bool moved = true;
    for (int p : procs(own_dir)) moved = write_text(own_dir + "/node/cgroup.procs", std::to_string(p)) && moved;
    if (moved && procs(own_dir).empty()) {
      enable(own_dir, wanted);
      node_dir = own_dir + "/trials";
      kill_and_remove(node_dir, std::chrono::seconds(10));  // a node before this one in the same cgroup
      if (::mkdir(node_dir.c_str(), 0755) == 0) {
        v2 = enable(node_dir, wanted);
        caps.how = "delegated";
        c->moved_from_ = own_dir;
      } else {
        node_dir.clear();
      }
    }
  }
  // 2. As root: a subtree of its own under <mount>/libtune, controllers enabled down to it.
  if (node_dir.empty() && c->mount_root_ == "/" && ::access((c->mount_ + "/cgroup.subtree_control").c_str(), W_OK) == 0) {
    auto shared = c->mount_ + "/libtune";
    if (::mkdir(shared.c_str(), 0755) == 0 || errno == EEXIST) {
      enable(c->mount_, wanted);
      enable(shared, wanted);
      c->shared_ = shared;
      auto dir = shared + "/" + node_folder(name);
      if (::mkdir(dir.c_str(), 0755) == 0) {
        node_dir = dir;
        v2 = enable(node_dir, wanted);
        caps.how = "root";
      }
    }
  }
  // 3. A child of its own cgroup (membership and cgroup.kill need no controllers; the
  //    limits come from cgroup v1 where the host has it, else none).
  if (node_dir.empty()) {
    auto dir = own_dir + "/libtune-" + node_folder(name);
    if (::mkdir(dir.c_str(), 0755) == 0) {
      node_dir = dir;
      c->shared_ = own_dir;
      caps.how = "own cgroup";
    }
  }
  if (node_dir.empty())
    return no_cgroups(std::string{"cannot make cgroups under "} + own_dir + " (" + ::strerror(errno) + ")");
  if (!exists(node_dir + "/cgroup.kill")) {
    ::rmdir(node_dir.c_str());
    return no_cgroups("the kernel has no cgroup.kill (Linux 5.14 or later has)");
  }
  c->trials_ = node_dir;
  caps.cgroup = true;
  caps.root = node_dir;
  caps.trials_path = (c->mount_root_ == "/" ? "" : c->mount_root_) + node_dir.substr(c->mount_.size());
  // Each limit through cgroup v2 where it is enabled, else a cgroup v1 hierarchy.
  auto v1_dir = [&](const std::string& controller, const std::string& probe) -> std::string {
    for (auto& m : all_mounts) {
      if (m.fstype != "cgroup" || std::find(m.options.begin(), m.options.end(), controller) == m.options.end()) continue;
      auto path = mine.count(controller) ? mine[controller] : "/";
      if (m.root != "/" && path.compare(0, m.root.size(), m.root) == 0) path = path.substr(m.root.size());
      auto dir = m.point + (path == "/" ? "" : path) + "/libtune-" + node_folder(name);
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return "";
      if (!exists(dir + "/" + probe)) {
        ::rmdir(dir.c_str());
        return "";
      }
      return dir;
    }
    return "";
  };
  auto pick = [&](const std::string& controller, const std::string& probe, bool& on, std::string& via, std::string& v1) {
    if (v2.count(controller)) {
      on = true;
      via = "cgroup v2";
    } else if (auto d = v1_dir(controller, probe); !d.empty()) {
      on = true;
      via = "cgroup v1";
      v1 = d;
    }
  };
  pick("memory", "memory.limit_in_bytes", caps.memory, caps.memory_via, c->memory_v1_);
  pick("cpu", "cpu.cfs_quota_us", caps.cpu, caps.cpu_via, c->cpu_v1_);
  pick("pids", "pids.max", caps.pids, caps.pids_via, c->pids_v1_);
  for (auto& r : require) {
    bool on = r == "memory" ? caps.memory : r == "cpu" ? caps.cpu : caps.pids;
    if (!on)
      return status{errc::invalid_argument,
                    "this node cannot enforce host " + r + " limits: the " + r + " controller is neither enabled for " +
                        node_dir + " (cgroup v2) nor mounted as cgroup v1. Run the node as root or under systemd with "
                        "Delegate=yes, or leave " + r + " out of --require-limits"};
  }
  c->sweep_dead_nodes();
  return c;
}

containment::~containment() {
  if (!caps_.cgroup) return;
  kill_and_remove(trials_, std::chrono::seconds(10));
  for (auto* v1 : {&memory_v1_, &cpu_v1_, &pids_v1_})
    if (!v1->empty()) kill_and_remove(*v1, std::chrono::seconds(2));
}

int containment::sweep_dead_nodes() {
  if (!caps_.cgroup) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  int removed = 0;
  auto sweep = [&](const std::string& parent, const std::string& prefix) {
    if (parent.empty()) return;
    for (auto& f : subfolders(parent)) {
      if (f.compare(0, prefix.size(), prefix) != 0) continue;
      int pid = folder_pid(f);
      if (pid <= 0 || pid_alive(pid)) continue;
      if (kill_and_remove(parent + "/" + f, std::chrono::seconds(5))) ++removed;
    }
  };
  if (caps_.how == "root") sweep(shared_, "");
  if (caps_.how == "own cgroup") sweep(shared_, "libtune-");
  for (auto* v1 : {&memory_v1_, &cpu_v1_, &pids_v1_})
    if (!v1->empty()) sweep(v1->substr(0, v1->rfind('/')), "libtune-");
  return removed;
}

expected<std::unique_ptr<trial_cgroup>> containment::make(const std::string& trial_id, const host_limits& limits) {
  if (limits.memory < 0 || limits.cpus < 0 || limits.pids < 0)
    return status{errc::invalid_argument, "negative host limits for trial " + trial_id};
  if (limits.memory > 0 && !caps_.memory)
    return status{errc::invalid_argument,
                  "it asks for " + human_bytes(limits.memory) + " of host memory, and this node cannot enforce host memory limits (" +
                      caps_.describe() + "): run the node as root or under systemd with Delegate=yes, or leave memory out of the trial's resources"};
  std::unique_ptr<trial_cgroup> t{new trial_cgroup};
  t->limits_ = limits;
  if (!caps_.cgroup) {
    t->spec_.subreaper = true;
    t->ended_ = true;
    return t;
  }
  if (trial_id.empty() || trial_id.find('/') != std::string::npos || trial_id[0] == '.')
    return status{errc::invalid_argument, "bad trial id \"" + trial_id + "\""};
  auto fail = [&](const status& s) -> expected<std::unique_ptr<trial_cgroup>> {
    t->ended_ = false;
    (void)t->end(0, std::chrono::seconds(2));
    return status{errc::insufficient, "its cgroup: " + s.message()};
  };
  auto dir = trials_ + "/" + trial_id;
  kill_and_remove(dir, std::chrono::seconds(5));  // an earlier run of it on this node
  if (::mkdir(dir.c_str(), 0755) != 0) return status{errc::insufficient, "cannot make its cgroup " + dir + ": " + ::strerror(errno)};
  t->v2_ = dir;
  t->path_ = (mount_root_ == "/" ? "" : mount_root_) + dir.substr(mount_.size());
  t->spec_.into = dir;
  t->spec_.kill = dir + "/cgroup.kill";
  auto v1 = [&](const std::string& base) -> expected<std::string> {
    auto d = base + "/" + trial_id;
    kill_and_remove(d, std::chrono::seconds(2));
    if (::mkdir(d.c_str(), 0755) != 0) return status{errc::insufficient, "cannot make " + d + ": " + ::strerror(errno)};
    t->v1_.push_back(d);
    t->spec_.join.push_back(d + "/cgroup.procs");
    return d;
  };
  // Memory: the limit, no swap to hide in, and an OOM ends the whole trial at once.
  if (caps_.memory) {
    if (caps_.memory_via == "cgroup v2") {
      t->memory_dir_ = dir;
      if (limits.memory > 0) {
        if (auto s = write_text(dir + "/memory.max", std::to_string(limits.memory)); !s) return fail(s);
        if (exists(dir + "/memory.swap.max")) (void)write_text(dir + "/memory.swap.max", "0");
        (void)write_text(dir + "/memory.oom.group", "1");
      }
    } else {
      auto d = v1(memory_v1_);
      if (!d) return fail(d.error());
      t->memory_dir_ = *d;
      t->memory_v1_ = true;
      if (limits.memory > 0) {
        if (auto s = write_text(*d + "/memory.limit_in_bytes", std::to_string(limits.memory)); !s) return fail(s);
        if (exists(*d + "/memory.memsw.limit_in_bytes")) (void)write_text(*d + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory));
      }
    }
  }
  if (caps_.cpu && limits.cpus > 0) {
    constexpr int64_t period = 100000;  // µs
    auto quota = std::max<int64_t>(1000, static_cast<int64_t>(std::llround(limits.cpus * period)));
    if (caps_.cpu_via == "cgroup v2") {
      t->cpu_dir_ = dir;
      if (auto s = write_text(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(period)); !s) return fail(s);
    } else {
      auto d = v1(cpu_v1_);
      if (!d) return fail(d.error());
      t->cpu_dir_ = *d;
      if (auto s = write_text(*d + "/cpu.cfs_period_us", std::to_string(period)); !s) return fail(s);
      if (auto s = write_text(*d + "/cpu.cfs_quota_us", std::to_string(quota)); !s) return fail(s);
    }
  }
  if (caps_.pids) {
    if (caps_.pids_via == "cgroup v2") {
      t->pids_dir_ = dir;
    } else {
      auto d = v1(pids_v1_);
      if (!d) return fail(d.error());
      t->pids_dir_ = *d;
      t->pids_v1_ = true;
    }
    if (limits.pids > 0)
      if (auto s = write_text(t->pids_dir_ + "/pids.max", std::to_string(limits.pids)); !s) return fail(s);
  }
  return t;
}

trial_cgroup::~trial_cgroup() {
  if (!ended_) (void)end(0, std::chrono::seconds(5));
}

host_usage trial_cgroup::usage() const {
  host_usage u;
  if (v2_.empty()) return u;
  if (!memory_dir_.empty()) {
    if (memory_v1_) {
      u.memory = read_number(memory_dir_ + "/memory.usage_in_bytes");
      u.memory_peak = read_number(memory_dir_ + "/memory.max_usage_in_bytes");
      u.oom_kills = std::max<int64_t>(0, read_key(memory_dir_ + "/memory.oom_control", "oom_kill"));
    } else {
      u.memory = read_number(memory_dir_ + "/memory.current");
      u.memory_peak = read_number(memory_dir_ + "/memory.peak");
      u.oom_kills = std::max<int64_t>(0, read_key(memory_dir_ + "/memory.events", "oom_kill"));
    }
  }
  if (auto usec = read_key(v2_ + "/cpu.stat", "usage_usec"); usec >= 0) u.cpu_seconds = static_cast<double>(usec) / 1e6;
  if (!pids_dir_.empty()) {
    u.pids = read_number(pids_dir_ + "/pids.current");
    u.pids_refused = std::max<int64_t>(0, read_key(pids_dir_ + "/pids.events", "max"));
  }
  return u;
}

bool trial_cgroup::freeze(bool frozen) {
  return !v2_.empty() && !ended_ && write_text(v2_ + "/cgroup.freeze", frozen ? "1" : "0");
}

std::vector<int> trial_cgroup::pids() const { return v2_.empty() ? std::vector<int>{} : procs(v2_); }

expected<std::vector<std::string>> trial_cgroup::end(int group, std::chrono::milliseconds timeout) {
  std::vector<std::string> escaped;
  if (ended_) return escaped;
  ended_ = true;
  if (v2_.empty()) return escaped;
  for (int p : procs(v2_)) {
    int ppid = 0, pgid = 0;
    std::string name;
    if (read_proc_stat(p, ppid, pgid, &name) && pgid != group) escaped.push_back(std::to_string(p) + " (" + name + ")");
  }
  bool ok = kill_and_remove(v2_, timeout);  // cgroup.kill, then removed once empty
  for (auto& d : v1_) ok = kill_and_remove(d, std::chrono::seconds(2)) && ok;
  if (!ok) return status{errc::insufficient, "its cgroup " + v2_ + " could not be emptied within " + std::to_string(timeout.count()) + " ms"};
  return escaped;
}

}  // namespace tune
