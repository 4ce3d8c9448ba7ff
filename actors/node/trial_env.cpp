// What a trial's process starts from on this node: its environment, and the folder of
// libtune.so when the loader would not find it.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

expected<std::pair<std::string, uint32_t>> rendezvous_point(const std::string& address) {
  std::string host = address.empty() ? "127.0.0.1" : address;
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(*v6);
  } else {
    return status{errc::invalid_argument, "the node's address " + host + " is not an IP address: a gang's workers "
                                          "meet at rank 0's node by IP (start the node with --address IP)"};
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return status{errc::insufficient, std::string{"no socket for the gang's rendezvous: "} + std::strerror(errno)};
  // Port 0: the kernel gives one that nothing holds; the worker binds it again at once
  // (SO_REUSEADDR lets it, the socket here being closed).
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::close(fd);
    return status{errc::insufficient, "no free port at " + host + " for the gang's rendezvous: " + why};
  }
  ::close(fd);
  uint16_t port = ss.ss_family == AF_INET ? ntohs(v4->sin_port) : ntohs(v6->sin6_port);
  return std::pair<std::string, uint32_t>{host, port};
}

}  // namespace tune
