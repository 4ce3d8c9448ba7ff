// What the benchmarks that start real processes share: the tune binary, and running a
// command against one cluster's runtime directory and token file.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace tune::bench {

// The tune binary: $TUNE_BINARY (a build moved to another machine), else the one built.
inline std::string tune_binary() {
  const char* e = std::getenv("TUNE_BINARY");
  return e && *e ? e : TUNE_BINARY;
}

// Runs `cmd` through the shell with the cluster's runtime dir and token file, no CUDA
// device visible unless the command sets one; its output and errors.
inline std::string sh(const std::string& dir, const std::string& token_path, const std::string& cmd) {
  std::string full = "TUNE_RUNTIME_DIR=" + dir + " TUNE_TOKEN_FILE=" + token_path + " CUDA_VISIBLE_DEVICES= " + cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) ::pclose(p);
  return out;
}

// The benchmark's own runtime folder and token file (one per process), made by
// make_scratch(); what runs from it is stopped and the folder removed however the
// benchmark ends: at exit (or die()), and, when it is killed or crashes, by a reaper
// process that waits for it (BENCH_KEEP=1 keeps both, for a look afterwards).
struct scratch {
  static inline std::string dir, token_path, name;
};

// Runs `cmd` against the scratch cluster.
inline std::string run(const std::string& cmd) { return sh(scratch::dir, scratch::token_path, cmd); }

// A machine-wide folder of the benchmark's own (TUNE_SHARED_DIR for its nodes: card
// claims, heads), on tmpfs as the default one is; removed with the scratch folder.
inline std::string scratch_shared_dir() { return "/dev/shm/" + scratch::dir.substr(scratch::dir.rfind('/') + 1); }

inline void cleanup_scratch() {
  if (scratch::dir.empty() || std::getenv("BENCH_KEEP")) return;
  run(tune_binary() + " stop --grace 5");
  std::system(("rm -rf " + scratch::dir + " " + scratch_shared_dir()).c_str());
  scratch::dir.clear();  // once: at exit again, or the reaper, find nothing to do
}

// Ends the benchmark with the reason (the scratch cluster is cleaned up).
[[noreturn]] inline void die(const std::string& why) {
  std::cerr << scratch::name << ": " << why << "\n";
  std::exit(1);
}

inline void make_scratch(const std::string& bench_name) {
  scratch::name = bench_name;
  std::string tmpl = "/tmp/" + bench_name + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) die("cannot make a scratch folder in /tmp");
  scratch::dir = tmpl;
  ::chmod(tmpl.c_str(), 0711);  // a root node's trials (nobody) reach their folders below it
  scratch::token_path = scratch::dir + "/token";
  // The benchmark's heads and nodes share a folder of their own: a head it starts is
  // never joined by someone's `tune run`, nor their cards' claims mixed with its.
  ::setenv("TUNE_SHARED_DIR", scratch_shared_dir().c_str(), 1);
  std::atexit(cleanup_scratch);
  if (std::getenv("BENCH_KEEP")) return;
  // The reaper: a shell in a session of its own (a Ctrl-C to the benchmark's process
  // group does not reach it; it ignores INT, TERM and HUP besides) whose stdin is a pipe
  // only this process holds open (close-on-exec: the daemons it starts do not inherit
  // it). When this process ends, however it ends (SIGKILL, a crash, std::_Exit), the
  // pipe closes, `cat` returns, and the cluster of the scratch folder is stopped and the
  // folder removed, unless cleanup_scratch() already did.
  // Everything the child needs is made before fork(): it only calls what is safe in a
  // child of a process with threads, up to exec.
  std::string env_dir = "TUNE_RUNTIME_DIR=" + scratch::dir, env_token = "TUNE_TOKEN_FILE=" + scratch::token_path,
              env_tune = "BENCH_TUNE=" + tune_binary(), env_path = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {env_dir.data(), env_token.data(), env_tune.data(), env_path.data(), nullptr};
  const char* script =
      "trap '' INT TERM HUP; cat >/dev/null; "
      "if [ -d \"$TUNE_RUNTIME_DIR\" ]; then \"$BENCH_TUNE\" stop --grace 5; rm -rf \"$TUNE_RUNTIME_DIR\" "
      "\"/dev/shm/${TUNE_RUNTIME_DIR##*/}\"; fi";
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) die("cannot make the reaper's pipe");
  pid_t pid = ::fork();
  if (pid < 0) die("cannot start the reaper");
  if (pid == 0) {
    ::setsid();
    ::dup2(p[0], 0);  // dup2 clears close-on-exec on the copy
    int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1), ::dup2(null, 2);
    ::execle("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr), envp);
    ::_exit(127);
  }
  ::close(p[0]);  // p[1] stays open, unread, for this process's life
}

// Starts a head on loopback and `nodes` node daemons with these arguments (e.g.
// "--num-gpus 16"), all on the scratch cluster; its address. Ends the benchmark if one
// does not start.
// `head_args` go to the head too (e.g. --tls-*); `port_offset` picks another port for a
// second cluster of the same benchmark.
inline std::string start_loopback_cluster(int nodes, const std::string& node_args, const std::string& head_args = "",
                                          int port_offset = 0) {
  int port = 20000 + static_cast<int>(::getpid() % 20000) + port_offset;
  auto out = run(tune_binary() + " start --head --host 127.0.0.1 --port " + std::to_string(port) + " " + head_args);
  if (out.find("head") == std::string::npos) die("the head did not start: " + out);
  std::string address = "127.0.0.1:" + std::to_string(port);
  for (int n = 0; n < nodes; ++n) {
    out = run(tune_binary() + " start --address " + address + " " + node_args);
    if (out.find("joined") == std::string::npos) die("node " + std::to_string(n) + " did not start: " + out);
  }
  return address;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace tune::bench
