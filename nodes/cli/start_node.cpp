// tune start --address HOST:PORT: a node of this machine's resources joins the head
// there; its parts come from actors/services/services.hpp, as the embedded cluster's do.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <variant>

#include "daemon.hpp"
#include "log.hpp"
#include "services/services.hpp"
#include "start.hpp"
#include "tune/cluster/token.hpp"
#include "tune/core/quantity.hpp"

namespace tune::cli {
namespace {

// How long `tune start --address` waits for its daemon to say it joined: the node's
// wait for its head and 5 s more.
constexpr int node_ready_wait_s = static_cast<int>(node_join_timeout.count()) + 5;

// A node's start, checked before it forks.
struct node_plan {
  host_port head;
  std::string dir, id, token;
  host_info host;
  node_resources resources;
  others_policy others;
  int audit_ms = 0;
  std::string containment;
  std::vector<std::string> require_limits;
  int64_t max_pids = 0;
  std::string trial_user;
  bool mps = false, block = false;
  std::string log_file() const { return dir + "/" + id + ".log"; }
};

std::string random_node_id() {
  std::random_device rd;
  std::uniform_int_distribution<uint32_t> dist;
  char buf[16];
  std::snprintf(buf, sizeof buf, "node-%08x", dist(rd));
  return buf;
}

node_resource_request resource_request(const po::variables_map& vm) {
  node_resource_request r;
  if (vm.count("num-cpus")) r.num_cpus = vm["num-cpus"].as<double>();
  if (vm.count("num-gpus")) r.num_gpus = vm["num-gpus"].as<int>();
  if (vm.count("gpus")) r.gpus = vm["gpus"].as<std::string>();
  if (vm.count("resources")) r.resources = vm["resources"].as<std::string>();
  return r;
}

// --require-limits memory,cpu: the exit code after a message, or -1.
int read_require_limits(const po::variables_map& vm, node_plan& p) {
  if (!vm.count("require-limits")) return -1;
  for (std::stringstream list(vm["require-limits"].as<std::string>()); list.good();) {
    std::string r;
    std::getline(list, r, ',');
    if (r.empty()) continue;
    if (r != "memory" && r != "cpu" && r != "pids")
      return fail("start", "--require-limits: \"" + r + "\" is not a limit; give a list of memory, cpu, pids", 2);
    p.require_limits.push_back(r);
  }
  return -1;
}

// The GPU audit, other programs on the cards and the trials' containment: the exit
// code after a message, or -1.
int read_host_options(const po::variables_map& vm, node_plan& p) {
  auto others = parse_others_policy(text_option(vm, "foreign-threshold"), text_option(vm, "foreign-margin"),
                                    "--foreign-threshold", "--foreign-margin");
  if (!others) return fail("start", others.error().message(), 2);
  p.others = *others;
  p.audit_ms = vm["gpu-audit-ms"].as<int>();
  if (auto s = check_gpu_audit_ms(p.audit_ms, "--gpu-audit-ms"); !s) return fail("start", s.message(), 2);
  p.containment = vm["containment"].as<std::string>();
  if (p.containment != "auto" && p.containment != "cgroup" && p.containment != "subreaper")
    return fail("start", "--containment " + p.containment + ": use auto, cgroup or subreaper", 2);
  if (int rc = read_require_limits(vm, p); rc >= 0) return rc;
  p.max_pids = vm["trial-max-pids"].as<int64_t>();
  if (auto s = check_trial_max_pids(p.max_pids, "--trial-max-pids"); !s) return fail("start", s.message(), 2);
  p.trial_user = text_option(vm, "trial-user");
  return -1;
}

std::variant<node_plan, int> plan_node(const po::variables_map& vm, const host_port& head, const std::string& dir) {
  node_plan p;
  p.head = head;
  p.dir = dir;
  auto token = read_token(vm["token-file"].as<std::string>());
  if (!token) return fail("start", token.error().message());
  if (!token->warning.empty()) std::cerr << "tune: warning: " << token->warning << "\n";
  p.token = token->token;
  if (int rc = use_client_tls("start", vm); rc >= 0) return rc;
  p.host = detect_host();
  if (!p.host.gpu.error.empty()) return fail("start", p.host.gpu.error, 2);
  p.id = random_node_id();
  auto resources = node_resources_for(resource_request(vm), p.host, p.id);  // actors/services/services.hpp
  if (!resources) return fail("start", resources.error().message(), 2);
  p.resources = *resources;
  if (int rc = read_host_options(vm, p); rc >= 0) return rc;
  p.mps = vm.count("mps") > 0;
  p.block = vm.count("block") > 0;
  return p;
}

node_options node_options_for(const node_plan& p, const node_host& host) {
  node_options opt;
  opt.head_host = p.head.host;
  opt.head_port = p.head.port;
  opt.token = p.token;
  opt.node_id = p.id;
  opt.hostname = p.host.hostname;
  opt.address = local_address_towards(p.head.host, p.head.port);
  opt.resources = p.resources;
  opt.work_dir = p.dir + "/" + p.id;  // programs/ and trials/ of this node
  fill_node_options(opt, host, p.audit_ms, p.max_pids);
  opt.others = p.others;
  return opt;
}

void log_resources(const node_plan& p) {
  auto& gpus = p.resources.gpus();
  log_line("node " + p.id + " on " + p.host.hostname + ": " + p.resources.total().to_string() +
           (p.host.gpu.gpus.empty() && !gpus.empty() ? " (logical GPUs)" : ""));
  for (auto& g : gpus)
    log_line("  gpu " + std::to_string(g.index) + ": " + g.name + ", " + format_bytes(g.memory_total) + ", " + g.uuid +
             (g.logical ? " (logical)" : ""));
}

std::string joined_message(const node_plan& p) {
  std::string gpus;
  for (auto& g : p.resources.gpus())
    gpus += "\n  gpu " + std::to_string(g.index) + ": " + g.name + ", " + g.uuid + (g.logical ? " (logical)" : "");
  return "tune: node " + p.id + " joined the head at " + p.head.to_string() + " (pid " + std::to_string(::getpid()) +
         ")\n  resources: " + p.resources.total().to_string() + gpus + "\n  runtime dir: " + p.dir +
         (p.block ? "" : "\n  log: " + p.log_file());
}

// Says why the node did not start; the exit code.
int not_started(const node_start& s, const node_plan& p, readiness& ready) {
  if (s.at == node_start::step::mps_cards || s.at == node_start::step::mps_daemon) {
    ready.failed("tune start: " + s.why.message());
    return s.at == node_start::step::mps_cards ? 2 : 1;
  }
  if (s.at == node_start::step::no_answer)
    ready.failed("tune start: no answer from the head at " + p.head.to_string() + " in " +
                 std::to_string(node_join_timeout.count()) + " s");
  else
    ready.failed("tune start: " + s.why.message());
  exit_watchdog(std::chrono::seconds(5));
  return 1;
}

// After a stop signal (SIGUSR1: the head refused the node, `fatal` says why): leaves
// the cluster when it can. The exit code.
int stop_node(caf::actor_system& sys, const caf::actor& node, int sig, const std::string& fatal) {
  int rc = 0;
  exit_watchdog(std::chrono::seconds(10));
  if (sig == SIGUSR1) {
    log_line("stopping: " + fatal);
    rc = 1;
  } else {
    log_line(std::string{"stopping ("} + strsignal(sig) + "); leaving the cluster");
    caf::scoped_actor self{sys};
    self->request(node, std::chrono::seconds(3), wire::leave_atom::value)
        .receive([](wire::leave_atom, bool) {}, [](caf::error&) { log_line("the head did not answer the goodbye"); });
  }
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  return rc;
}

// The node's daemon (or foreground process): joined, then until a stop signal.
int run_node(const node_plan& p, readiness& ready) {
  auto signals = service_signals();
  // The spawner and the trials' containment, before CAF's threads (actors/services/services.hpp);
  // they end after the actor system, killing whatever is left.
  auto host_parts = open_node_host({p.id, p.containment, p.require_limits, p.trial_user});
  if (!host_parts) {
    ready.failed("tune start: " + host_parts.error().message());
    return 2;
  }
  wire::config cfg;
  caf::actor_system sys{cfg};
  auto opt = node_options_for(p, *host_parts);
  if (auto s = check_trial_folder(opt); !s) {
    ready.failed("tune start: " + s.message());
    return 2;
  }
  auto fatal_message = std::make_shared<std::string>();
  opt.on_fatal = [fatal_message](const status& st) {
    *fatal_message = st.message();
    ::kill(::getpid(), SIGUSR1);
  };
  log_resources(p);
  auto started = start_node_service(sys, std::move(opt), {.mps = p.mps});  // MPS, spawn, the join wait
  if (!started) return not_started(started, p, ready);
  std::string pid_file = p.dir + "/" + p.id + ".pid";
  if (auto w = write_pid_file(pid_file); !w) {
    ready.failed("tune start: " + w.message());
    caf::anon_send_exit(started.node, caf::exit_reason::user_shutdown);
    return 1;
  }
  ready.ready(joined_message(p));
  int sig = 0;
  sigwait(&signals, &sig);
  int rc = stop_node(sys, started.node, sig, *fatal_message);
  ::unlink(pid_file.c_str());
  return rc;
}

}  // namespace

int start_node(const po::variables_map& vm, const host_port& head, const std::string& dir) {
  auto plan = plan_node(vm, head, dir);
  if (auto* rc = std::get_if<int>(&plan)) return *rc;
  auto& p = std::get<node_plan>(plan);
  return run_service(p.block, p.log_file(), node_ready_wait_s, [&p](readiness& ready) { return run_node(p, ready); });
}

}  // namespace tune::cli
