#include "harness.hpp"

#include <sys/stat.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <thread>

namespace tune::test {

long resident_kib(int pid) {
  std::ifstream proc{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(proc, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

std::string tune_binary() { return built_or_moved("TUNE_BINARY", TUNE_BINARY); }

run_result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               std::chrono::milliseconds timeout, const std::string& cwd) {
  run_result r;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::setpgid(0, 0);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      std::fprintf(stderr, "cannot enter %s: %s\n", cwd.c_str(), std::strerror(errno));
      std::_Exit(127);
    }
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  // A daemonizing `tune start` leaves its child holding no copy of these pipes (it
  // redirects to its log), so end of file comes when the command itself is done.
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false;
  while (open_fds > 0) {
    auto left = timeout - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t k = ::read(fds[i].fd, buf, sizeof buf);
      if (k <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(k));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int st = 0;
  rusage usage{};
  ::wait4(pid, &st, 0, &usage);
  r.max_rss_kib = usage.ru_maxrss;
  r.rc = killed ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return r;
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line, nullptr, false); !j.is_discarded()) out.push_back(j);
  return out;
}

std::pair<int, std::string> http_get(const std::string& url, const std::string& token_file) {
  std::ifstream in(token_file);
  std::string token;
  std::getline(in, token);
  auto r = run({"python3", "-c",
                "import sys, urllib.request, urllib.error\n"
                "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
                "try:\n  r = urllib.request.urlopen(req, timeout=10); code, body = r.status, r.read()\n"
                "except urllib.error.HTTPError as e:\n  code, body = e.code, e.read()\n"
                "sys.stdout.buffer.write(str(code).encode() + b'\\n' + body)\n",
                url, token});
  auto nl = r.out.find('\n');
  if (r.rc != 0 || nl == std::string::npos) return {-1, r.err};
  return {std::stoi(r.out.substr(0, nl)), r.out.substr(nl + 1)};
}

nlohmann::json last_json_line(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return nullptr;
  auto start = out.rfind('\n', end);
  auto j = nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

std::optional<std::chrono::milliseconds> wait_until(const std::function<bool()>& ok, std::chrono::milliseconds timeout,
                                                    std::chrono::milliseconds every) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (ok()) return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (std::chrono::steady_clock::now() - start > timeout) return std::nullopt;
    std::this_thread::sleep_for(every);
  }
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int pid_in(const std::string& text) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex{R"(\(pid (\d+)\))"})) return std::stoi(m[1]);
  return 0;
}

std::set<std::string> workers_of_node(const std::string& id) {
  std::set<std::string> pids;
  std::error_code ec;
  for (auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    auto cwd = std::filesystem::read_symlink(p.path() / "cwd", ec);
    if (!ec && cwd.string().find("/" + id + "/trials/") != std::string::npos) pids.insert(p.path().filename());
  }
  return pids;
}

int processes_running(const std::vector<std::string>& args) {
  std::string want;
  for (auto& a : args) want += a + '\0';
  int n = 0;
  std::error_code ec;
  for (auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream in(p.path() / "cmdline", std::ios::binary);
    std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    n += line.find(want) != std::string::npos;
  }
  return n;
}

std::string node_id_in(const std::string& text) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex{R"(node-[0-9a-f]{8})"})) return m[0];
  return {};
}

cluster_files::cluster_files() {
  char tmpl[] = "/tmp/libtune-test-XXXXXX";
  dir_ = ::mkdtemp(tmpl);
  // Searchable by others: a root node's trials run as nobody, in folders below this one.
  ::chmod(dir_.c_str(), 0711);
}

cluster_files::~cluster_files() {
  // Stop whatever is still running from any runtime dir under ours, then remove it.
  run({"sh", "-c", "for d in \"$0\" \"$0\"/*/; do [ -d \"$d\" ] && \"$1\" stop --grace 3 --runtime-dir \"$d\"; done",
       dir_, tune_binary()},
      {}, std::chrono::seconds(30));
  run({"rm", "-rf", dir_});
}

std::map<std::string, std::string> cluster_files::env(const std::string& runtime) const {
  // No CUDA device is visible unless a test says so: --num-gpus then declares logical
  // GPUs on every machine, GPU machines included.
  return {{"TUNE_RUNTIME_DIR", runtime.empty() ? dir_ : runtime},
          {"TUNE_TOKEN_FILE", token_file()},
          {"CUDA_VISIBLE_DEVICES", ""}};
}

run_result cluster_files::tune(std::vector<std::string> args, const std::vector<std::string>& prefix,
                               const std::string& runtime, std::map<std::string, std::string> extra_env) const {
  std::vector<std::string> argv = prefix;
  argv.push_back(tune_binary());
  argv.insert(argv.end(), args.begin(), args.end());
  auto e = env(runtime);
  for (auto& [k, v] : extra_env) e[k] = v;
  return run(argv, e);
}

nlohmann::json cluster_files::status(const std::string& address, const std::vector<std::string>& prefix) const {
  auto r = tune({"status", "--address", address, "--json", "--timeout", "3"}, prefix);
  if (r.rc != 0) return nullptr;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nullptr : j;
}

std::string cluster_files::state_of(const std::string& address, const std::string& node,
                                    const std::vector<std::string>& prefix) const {
  auto s = status(address, prefix);
  if (s.is_null()) return "no status";
  for (auto& n : s["nodes"])
    if (n["id"] == node) return n["state"];
  return "absent";
}

bool process_gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

netns_lab::netns_lab(int hosts) {
  prefix_ = "lt" + std::to_string(::getpid() % 100000) + "x" + std::to_string(counter_++);
  sw_ = prefix_ + "sw";
  ok_ = ip({"netns", "add", sw_}) && ip({"-n", sw_, "link", "add", "br0", "type", "bridge"}) &&
        ip({"-n", sw_, "link", "set", "br0", "up"});
  for (int i = 0; i < hosts && ok_; ++i) {
    std::string h = prefix_ + "h" + std::to_string(i), port = "p" + std::to_string(i);
    names_.push_back(h);
    ok_ = ip({"netns", "add", h}) &&
          ip({"link", "add", "eth0", "netns", h, "type", "veth", "peer", "name", port, "netns", sw_}) &&
          ip({"-n", sw_, "link", "set", port, "master", "br0"}) && ip({"-n", sw_, "link", "set", port, "up"}) &&
          ip({"-n", h, "addr", "add", address(i) + "/24", "dev", "eth0"}) && ip({"-n", h, "link", "set", "eth0", "up"}) &&
          ip({"-n", h, "link", "set", "lo", "up"});
  }
}

netns_lab::~netns_lab() {
  for (auto& n : names_) {
    run({"sh", "-c", "ip netns pids " + n + " | xargs -r kill -9"});
    ip({"netns", "del", n});
  }
  ip({"netns", "del", sw_});
}

bool netns_lab::link(int host, bool up) {
  return ip({"-n", name(host), "link", "set", "eth0", up ? "up" : "down"});
}

bool netns_lab::ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  auto r = run(args, {}, std::chrono::seconds(10));
  if (r.rc != 0 && why_.empty()) {
    why_ = "`";
    for (auto& a : args) why_ += (why_.size() > 1 ? " " : "") + a;
    why_ += "` failed: " + (r.err.empty() ? "exit " + std::to_string(r.rc) : r.err);
  }
  return r.rc == 0;
}

}  // namespace tune::test
