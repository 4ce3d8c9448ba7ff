// Real processes for the system tests: run the `tune` binary (optionally inside a
// network namespace), read its output, and keep a test cluster's files in a
// temporary directory.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace tune::test {

struct run_result {
  int rc = -1;       // exit code; -1 when it had to be killed at the timeout
  std::string out, err;
  std::chrono::milliseconds took{0};
  long max_rss_kib = 0;  // the largest resident set of the process (not of its children)
};

// Runs argv with `env` added to the environment (in `cwd` when given); kills it after
// `timeout`.
run_result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
               std::chrono::milliseconds timeout = std::chrono::seconds(30), const std::string& cwd = "");

// The last line of a program's standard output as JSON (tune run's summary); null when
// it is not JSON.
nlohmann::json last_json_line(const std::string& out);

// The lines of a file that are JSON (a trial's record of what it saw), in order.
std::vector<nlohmann::json> json_lines(const std::string& path);

// GET `url` with the token in `token_file` as its bearer (a dashboard's API), through
// python3's urllib: {HTTP status, body}; {-1, why} when it could not ask.
std::pair<int, std::string> http_get(const std::string& url, const std::string& token_file);

// Polls `ok` every `every` until it is true or `timeout` passes; returns the time it took
// (or nothing on timeout).
std::optional<std::chrono::milliseconds> wait_until(const std::function<bool()>& ok, std::chrono::milliseconds timeout,
                                                    std::chrono::milliseconds every = std::chrono::milliseconds(20));

// A free TCP port on 127.0.0.1 right now.
// A binary the tests run: $<env> when set (a build moved to another machine, e.g. the
// GPU machine), else the one built here.
inline std::string built_or_moved(const char* env, const char* built) {
  const char* moved = std::getenv(env);
  return moved && *moved ? moved : built;
}

int free_port();

// The tune binary: $TUNE_BINARY (a build moved to another machine), else the one built.
std::string tune_binary();

// The resident memory of process `pid` in KiB (VmRSS), 0 when it cannot be read.
long resident_kib(int pid);

// Whether a process is gone: no such process, or a zombie nobody reaped yet.
bool process_gone(int pid);

// The `pid N` in a `tune start` message, and the `node-xxxxxxxx` id.
int pid_in(const std::string& text);
std::string node_id_in(const std::string& text);
// The processes (of any trial) whose folder is on node `id` (its work dir is
// <state>/<node id>/trials/...): their pids.
std::set<std::string> workers_of_node(const std::string& id);
// How many processes have these arguments in a row in their command line (read from
// /proc: no procps needed).
int processes_running(const std::vector<std::string>& args);

// A folder of the test's own under /tmp (`prefix` names it), removed with everything in
// it when the test ends.
struct scratch_dir {
  std::string path;
  explicit scratch_dir(const std::string& prefix = "libtune-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    path = ::mkdtemp(tmpl.data());
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

// One test cluster's files: a runtime directory and a token file, and the commands to
// run tune against them. `prefix` runs every command through e.g. `ip netns exec NS`.
class cluster_files {
 public:
  cluster_files();
  ~cluster_files();
  cluster_files(const cluster_files&) = delete;
  cluster_files& operator=(const cluster_files&) = delete;

  const std::string& dir() const { return dir_; }
  std::string token_file() const { return dir_ + "/token"; }
  std::map<std::string, std::string> env(const std::string& runtime = "") const;

  // tune <args...> with this cluster's runtime dir and token, and no CUDA device
  // visible unless `extra_env` sets CUDA_VISIBLE_DEVICES.
  run_result tune(std::vector<std::string> args, const std::vector<std::string>& prefix = {},
                  const std::string& runtime = "", std::map<std::string, std::string> extra_env = {}) const;
  // tune status --json against `address`; null when it failed.
  nlohmann::json status(const std::string& address, const std::vector<std::string>& prefix = {}) const;
  // The state of a node in the status ("alive", "dead", "left"), or "absent".
  std::string state_of(const std::string& address, const std::string& node, const std::vector<std::string>& prefix = {}) const;

 private:
  std::string dir_;
};

// Separate hosts on one machine: network namespaces wired to a bridge in a switch
// namespace (veth pairs). Host i is at 10.213.0.(i+1)/24; hosts[0] is where tests put
// the head. Needs root and iproute2: ok() is false (and why() says why) otherwise.
// Removing the lab kills every process left in its namespaces.
class netns_lab {
 public:
  explicit netns_lab(int hosts);
  ~netns_lab();
  netns_lab(const netns_lab&) = delete;
  netns_lab& operator=(const netns_lab&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  static std::string address(int host) { return "10.213.0." + std::to_string(host + 1); }
  const std::string& name(int host) const { return names_[static_cast<size_t>(host)]; }
  // The prefix that runs a command on `host`: ip netns exec NAME.
  std::vector<std::string> on(int host) const { return {"ip", "netns", "exec", name(host)}; }
  // Cuts or restores the host's link to the bridge.
  bool link(int host, bool up);

 private:
  bool ip(std::vector<std::string> args);
  static inline int counter_ = 0;
  std::string prefix_, sw_, why_;
  std::vector<std::string> names_;
  bool ok_ = false;
};

}  // namespace tune::test
