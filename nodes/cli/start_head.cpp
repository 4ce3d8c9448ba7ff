// tune start --head: the cluster's tokens and users, the gate on its port, the head
// and its dashboard (actors/services/services.hpp), and its record for programs on this machine.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <variant>

#include "transport/basp_fd.hpp"
#include "daemon.hpp"
#include "transport/gate.hpp"
#include "log.hpp"
#include "services/services.hpp"
#include "start.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/users.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/host/detect.hpp"
#include "tune/host/local_heads.hpp"

namespace tune::cli {
namespace {

// How long `tune start --head` waits for its daemon to say it is up.
constexpr int head_ready_wait_s = 20;

// A head's start, checked before it forks.
struct head_plan {
  std::string dir, host, token_path, node_token_path;
  int port = 0;
  bool block = false;
  std::string token, node_token;
  std::shared_ptr<user_store> users;
  std::chrono::milliseconds orphan_grace{};
  std::shared_ptr<tls::context> server_tls;  // none: plain
  std::optional<dashboard_options> dashboard;
  std::string log_file() const { return dir + "/head-" + std::to_string(port) + ".log"; }
};

// The admin token (made when missing), the node token beside it and the users file:
// the exit code after a message, or -1.
int open_tokens(head_plan& p) {
  auto token = ensure_token(p.token_path);
  if (!token) return fail("start", token.error().message());
  if (token->created) std::cout << "tune: created a new cluster token in " << p.token_path << " (mode 0600)\n";
  if (!token->warning.empty()) std::cerr << "tune: warning: " << token->warning << "\n";
  p.token = token->token;
  // Nodes join with the node token, which can do nothing else; users have their own
  // (docs/users.md), kept beside it.
  p.node_token_path = node_token_file_beside(p.token_path);
  auto node_token = ensure_token(p.node_token_path);
  if (!node_token) return fail("start", node_token.error().message());
  if (node_token->created)
    std::cout << "tune: created the node token in " << p.node_token_path
              << " (mode 0600): nodes join with it (tune start --address ... --token-file FILE)\n";
  p.node_token = node_token->token;
  auto users = user_store::open(users_file_beside(p.token_path));
  if (!users) return fail("start", users.error().message());
  p.users = std::move(*users);
  return -1;
}

// TLS: every connection to the gate is a TLS session checked against the cluster's CA;
// the dashboard's HTTPS has the same certificate, and browsers show none of their own
// (they sign in with a token). The exit code after a message, or -1.
int open_tls(const po::variables_map& vm, head_plan& p) {
  auto files = tls_files(vm);
  if (!files.any()) return -1;
  auto ctx = tls::context::make(files, true);
  if (!ctx) return fail("start", ctx.error().message(), 2);
  p.server_tls = *ctx;
  auto web = tls::context::make(files, true, false);
  if (!web) return fail("start", web.error().message(), 2);
  if (p.dashboard) p.dashboard->tls = *web;
  return -1;
}

std::optional<dashboard_options> dashboard_from(const po::variables_map& vm, const std::string& host) {
  if (vm.count("no-dashboard")) return std::nullopt;
  dashboard_options d;
  d.host = vm.count("dashboard-host") ? vm["dashboard-host"].as<std::string>() : host.empty() ? "0.0.0.0" : host;
  d.port = vm["dashboard-port"].as<int>();
  d.any_port_if_taken = vm["dashboard-port"].defaulted();
  return d;
}

std::variant<head_plan, int> plan_head(const po::variables_map& vm, const std::string& dir) {
  head_plan p;
  p.dir = dir;
  p.port = vm["port"].as<int>();
  if (p.port < 0 || p.port > 65535) return fail("start", "--port must be between 0 and 65535", 2);
  p.host = text_option(vm, "host");
  p.token_path = vm["token-file"].as<std::string>();
  if (int rc = open_tokens(p); rc >= 0) return rc;
  if (p.port != 0) {
    if (int pid = live_pid(dir + "/head-" + std::to_string(p.port) + ".pid"))
      return fail("start", "a head on port " + std::to_string(p.port) + " is already running (pid " +
                               std::to_string(pid) + "); `tune stop` stops it");
  }
  double orphan_grace_s = vm["orphan-grace"].as<double>();
  if (!(orphan_grace_s >= 0 && orphan_grace_s <= 86400))
    return fail("start", "--orphan-grace must be between 0 and 86400 seconds", 2);
  p.orphan_grace = std::chrono::milliseconds(static_cast<int64_t>(orphan_grace_s * 1000));
  p.dashboard = dashboard_from(vm, p.host);
  if (p.dashboard)  // a killed head's socket folder is left there, not in /tmp
    p.dashboard->socket_parent = std::filesystem::absolute(p.dir).lexically_normal().string();
  if (int rc = open_tls(vm, p); rc >= 0) return rc;
  p.block = vm.count("block") > 0;
  return p;
}

// Connections the gate accepted reach the head through a socketpair each
// (actors/transport/basp_fd.hpp).
void relay_to_head(basp_gate& gate, caf::actor_system& sys, caf::actor head, uint16_t port) {
  gate.run([&sys, head, port] {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      log_line(std::string{"the gate cannot reach the head: socketpair: "} + std::strerror(errno));
      return -1;
    }
    serve_fd(sys, sv[0], head, port, "gate");  // CAF owns sv[0] from here on
    return sv[1];
  });
}

// Programs on this machine find the head (tune run, tuning scripts without --address).
void announce_here(const head_plan& p, uint16_t port) {
  local_head here;
  bool wildcard = p.host.empty() || p.host == "0.0.0.0" || p.host == "::";
  here.address = (wildcard ? std::string{"127.0.0.1"} : p.host) + ":" + std::to_string(port);
  here.port = port;
  here.pid = ::getpid();
  here.started = process_start_time(here.pid);
  here.uid = ::getuid();
  here.user = user_name(here.uid);
  here.token_file = std::filesystem::absolute(p.token_path).string();
  here.tls = static_cast<bool>(p.server_tls);
  here.version = version();
  if (auto a = announce_head(here); !a) log_line("programs on this machine will not find this head: " + a.message());
}

std::string started_message(const head_plan& p, const std::string& address, const std::string& dashboard) {
  return "tune: head started at " + address + " (pid " + std::to_string(::getpid()) + ")" +
         (p.server_tls ? " with TLS: every process connects with --tls-cert, --tls-key and --tls-ca" : "") + "\n" +
         "  runtime dir: " + p.dir + "\n" + (p.block ? "" : "  log: " + p.log_file() + "\n") +
         "  token file:  " + p.token_path + "\n" +
         (dashboard.empty() ? "" : "  dashboard:   " + dashboard + " (tune dashboard prints a link that signs in)\n") +
         "  nodes join with: tune start --address " + address + " --token-file " + p.node_token_path +
         " (the node token; the admin token works too)\n" + "  users: tune user add NAME (each gets a token of their own)";
}

head_options head_options_for(const head_plan& p, const std::string& address) {
  groups_options groups;
  groups.orphan_grace = p.orphan_grace;
  head_options hopt{p.token, address, wire::heartbeat_timeout, groups};
  hopt.node_token = p.node_token;
  hopt.users = p.users;
  return hopt;
}

// The head's daemon (or foreground process): up, then until a stop signal.
int run_head(const head_plan& p, readiness& ready) {
  auto signals = service_signals();
  wire::config cfg;
  caf::actor_system sys{cfg};
  // The gate owns the public port and checks every frame's length before CAF reads
  // it; CAF listens on no port: each connection reaches it through a socketpair the
  // gate feeds (actors/transport/gate.hpp, actors/transport/basp_fd.hpp).
  gate_options gopt;
  gopt.host = p.host;
  gopt.port = static_cast<uint16_t>(p.port);
  gopt.tls = p.server_tls;
  auto gate = basp_gate::listen(gopt);
  if (!gate) {
    ready.failed("tune start: cannot listen on " + (p.host.empty() ? std::string{"port "} : p.host + ":") +
                 std::to_string(p.port) + ": " + gate.error().message());
    return 1;
  }
  uint16_t actual = (*gate)->port();
  std::string shown_host = p.host.empty() ? hostname() : p.host;  // the head probes no GPU
  std::string address = shown_host + ":" + std::to_string(actual);
  auto service = start_head_service(sys, head_options_for(p, address), p.dashboard, shown_host);  // actors/services/services.hpp
  if (!service) {
    ready.failed("tune start: " + service.error().message());
    return 1;
  }
  auto head = service->head;
  relay_to_head(**gate, sys, head, actual);
  std::string pid_file = p.dir + "/head-" + std::to_string(actual) + ".pid";
  if (auto st = write_pid_file(pid_file); !st) {
    ready.failed("tune start: " + st.message());
    caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
    return 1;
  }
  log_line("head listening at " + address + (p.server_tls ? " with TLS" : "") + " (libtune " + version() + ", pid " +
           std::to_string(::getpid()) + ")");
  announce_here(p, actual);
  ready.ready(started_message(p, address, service->dashboard_url));
  int sig = 0;
  sigwait(&signals, &sig);
  log_line(std::string{"stopping ("} + strsignal(sig) + ")");
  exit_watchdog(std::chrono::seconds(10));
  gate->reset();
  service->dashboard.reset();
  sys.middleman().unpublish(head, actual);
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  withdraw_head(actual);
  ::unlink(pid_file.c_str());
  return 0;
}

}  // namespace

int start_head(const po::variables_map& vm, const std::string& dir) {
  auto plan = plan_head(vm, dir);
  if (auto* rc = std::get_if<int>(&plan)) return *rc;
  auto& p = std::get<head_plan>(plan);
  return run_service(p.block, p.log_file(), head_ready_wait_s, [&p](readiness& ready) { return run_head(p, ready); });
}

}  // namespace tune::cli
