// tune: start and stop libtune's head and nodes, show the cluster, and tune programs
// (docs/cli.md has every command).
//
//   tune start --head [--port 6380] [--host ADDR] [--token-file F] [--block]
//   tune start --address HOST:PORT [--num-gpus N | --gpus 0,2] [--num-cpus N]
//              [--resources '{"tpu":2}'] [--mps] [--gpu-audit-ms N] [--token-file F] [--block]
//   tune status --address HOST:PORT [--json] [--token-file F]
//   tune group create --bundles JSON [--strategy S] [--wait S] | get ID | remove ID
//   tune run [FILE] [flags] [-- COMMAND...]   (run.cpp)
//   tune resume DIR | rebalance | drain NODE | dashboard
//   tune stop
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sys/socket.h>
#include <filesystem>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <variant>

#include "tune/core/json_text.hpp"
#include "tune/cluster/address.hpp"
#include "client.hpp"
#include "daemon.hpp"
#include "dashboard.hpp"
#include "basp_fd.hpp"
#include "dial.hpp"
#include "tune/net/tls.hpp"
#include "gate.hpp"
#include "head.hpp"
#include "log.hpp"
#include "node/node.hpp"
#include "run.hpp"
#include "services.hpp"
#include "tune/cluster/status_text.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/users.hpp"
#include "tune/core/quantity.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/host/detect.hpp"
#include "tune/host/local_heads.hpp"
#include "tune/trial/mps.hpp"
#include "tune/tuner/store.hpp"
#include "wire.hpp"

namespace po = boost::program_options;
using namespace tune;

namespace {

constexpr uint16_t default_port = 6380;

const char* usage =
    "usage: tune <command> [options]\n"
    "\n"
    "commands:\n"
    "  start    start a head (--head) or a node that joins one (--address HOST:PORT)\n"
    "  status   show the nodes, resources, GPUs and placement groups of a cluster\n"
    "  group    create, show or remove a placement group (bundles reserved across nodes)\n"
    "  stop     stop the heads and nodes this machine started\n"
    "  run      tune any program (a Python script, ...): tune run experiment.yaml, or -- COMMAND\n"
    "  resume   continue an experiment whose tuning program died (runs that program again)\n"
    "  rebalance  even the GPU load across nodes (trials move, from their checkpoints)\n"
    "  drain    move every trial off a node and place nothing new there (maintenance)\n"
    "  dashboard  print the head's web dashboard address (with a link that signs in)\n"
    "  user     add, change, list or remove the cluster's users (their tokens, quotas, priorities)\n"
    "  tls      make a CA and a certificate for a cluster's TLS (tune tls init DIR)\n"
    "\n"
    "`tune <command> --help` describes a command's options; `tune --version` prints the version.\n";

int fail(const std::string& command, const std::string& message, int code = 1) {
  std::cerr << "tune " << command << ": " << message << "\n";
  return code;
}

// Parses `args` with `desc` (and `positional`, when given: options named by place);
// on --help prints the synopsis, `about` and the options and returns 0; on a bad option
// returns 2 with a message. -1 means: go on.
int parse(const std::string& command, const std::vector<std::string>& args, const po::options_description& desc,
          const std::string& synopsis, po::variables_map& vm,
          const po::positional_options_description* positional = nullptr, const std::string& about = {}) {
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    auto parsed = parser.run();
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    return fail(command, "unknown option '" + e.get_option_name() + "' (see tune " + command + " --help)", 2);
  } catch (const po::error& e) {
    return fail(command, std::string{e.what()} + " (see tune " + command + " --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << "usage: " << synopsis << "\n\n" << about << (about.empty() ? "" : "\n\n") << desc;
    return 0;
  }
  return -1;
}

// Blocks the signals a service waits for, in this thread and every thread it starts.
sigset_t service_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// After a stop signal, the process ends within `limit` even if something hangs.
void exit_watchdog(std::chrono::seconds limit) {
  std::thread([limit] {
    std::this_thread::sleep_for(limit);
    log_line("shutdown took longer than " + std::to_string(limit.count()) + " s; exiting now");
    std::_Exit(1);
  }).detach();
}

std::string random_node_id() {
  std::random_device rd;
  std::uniform_int_distribution<uint32_t> dist;
  char buf[16];
  std::snprintf(buf, sizeof buf, "node-%08x", dist(rd));
  return buf;
}


// --- tune start --head -------------------------------------------------------

// --tls-cert, --tls-key, --tls-ca (docs/cluster.md, Security).
void add_tls_options(po::options_description& desc) {
  desc.add_options()
      ("tls-cert", po::value<std::string>(), "this process's certificate, for a cluster that uses TLS (default: $TUNE_TLS_CERT)")
      ("tls-key", po::value<std::string>(), "its key (default: $TUNE_TLS_KEY)")
      ("tls-ca", po::value<std::string>(), "the cluster's CA certificate: peers must show one it signed (default: $TUNE_TLS_CA)");
}

// The TLS files the options (or the environment) give; none: plain.
tls::files tls_files(const po::variables_map& vm) {
  auto get = [&](const char* name) { return vm.count(name) ? vm[name].as<std::string>() : std::string{}; };
  return tls::from_environment({get("tls-cert"), get("tls-key"), get("tls-ca")});
}

// Makes this process dial heads over TLS when it has TLS files; the exit code after a
// message when they are bad, -1 to go on.
int use_client_tls(const std::string& command, const po::variables_map& vm) {
  auto files = tls_files(vm);
  if (!files.any()) return -1;
  auto ctx = tls::context::make(files, false);
  if (!ctx) return fail(command, ctx.error().message(), 2);
  set_client_tls(*ctx);
  return -1;
}

int start_head(const po::variables_map& vm, const std::string& dir) {
  auto port = vm["port"].as<int>();
  if (port < 0 || port > 65535) return fail("start", "--port must be between 0 and 65535", 2);
  std::string host = vm.count("host") ? vm["host"].as<std::string>() : "";
  auto token_path = vm["token-file"].as<std::string>();
  auto token = ensure_token(token_path);
  if (!token) return fail("start", token.error().message());
  if (token->created) std::cout << "tune: created a new cluster token in " << token_path << " (mode 0600)\n";
  if (!token->warning.empty()) std::cerr << "tune: warning: " << token->warning << "\n";
  // Nodes join with the node token, which can do nothing else; users have their own
  // (docs/users.md), kept beside it.
  auto node_token_path = node_token_file_beside(token_path);
  auto node_token = ensure_token(node_token_path);
  if (!node_token) return fail("start", node_token.error().message());
  if (node_token->created)
    std::cout << "tune: created the node token in " << node_token_path
              << " (mode 0600): nodes join with it (tune start --address ... --token-file FILE)\n";
  auto users = user_store::open(users_file_beside(token_path));
  if (!users) return fail("start", users.error().message());
  std::shared_ptr<user_store> shared_users{std::move(*users)};
  if (port != 0) {
    if (int pid = cli::live_pid(dir + "/head-" + std::to_string(port) + ".pid"))
      return fail("start", "a head on port " + std::to_string(port) + " is already running (pid " +
                               std::to_string(pid) + "); `tune stop` stops it");
  }
  double orphan_grace_s = vm["orphan-grace"].as<double>();
  if (!(orphan_grace_s >= 0 && orphan_grace_s <= 86400))
    return fail("start", "--orphan-grace must be between 0 and 86400 seconds", 2);
  // TLS: every connection to the gate is a TLS session checked against the cluster's CA.
  std::shared_ptr<tls::context> server_tls, dashboard_tls;
  if (auto files = tls_files(vm); files.any()) {
    auto ctx = tls::context::make(files, true);
    if (!ctx) return fail("start", ctx.error().message(), 2);
    server_tls = *ctx;
    // The dashboard's HTTPS: the same certificate; browsers show no certificate of
    // their own (they sign in with a token).
    auto web = tls::context::make(files, true, false);
    if (!web) return fail("start", web.error().message(), 2);
    dashboard_tls = *web;
  }
  bool block = vm.count("block") > 0;
  std::string log_file = dir + "/head-" + std::to_string(port) + ".log";
  return cli::run_service(block, log_file, 20, [&](cli::readiness& ready) {
    auto signals = service_signals();
    wire::config cfg;
    caf::actor_system sys{cfg};
    // The gate owns the public port and checks every frame's length before CAF reads
    // it; CAF listens on no port: each connection reaches it through a socketpair the
    // gate feeds (actors/gate.hpp, actors/basp_fd.hpp).
    gate_options gopt;
    gopt.host = host;
    gopt.port = static_cast<uint16_t>(port);
    gopt.tls = server_tls;
    auto gate = basp_gate::listen(gopt);
    if (!gate) {
      ready.failed("tune start: cannot listen on " + (host.empty() ? std::string{"port "} : host + ":") +
                   std::to_string(port) + ": " + gate.error().message());
      return 1;
    }
    uint16_t actual = (*gate)->port();
    std::string shown_host = host.empty() ? hostname() : host;  // the head probes no GPU
    groups_options groups;
    groups.orphan_grace = std::chrono::milliseconds(static_cast<int64_t>(orphan_grace_s * 1000));
    head_options hopt{token->token, shown_host + ":" + std::to_string(actual), wire::heartbeat_timeout, groups};
    hopt.node_token = node_token->token;
    hopt.users = shared_users;
    std::optional<dashboard_options> dopt;
    if (!vm.count("no-dashboard")) {
      dopt.emplace();
      dopt->host = vm.count("dashboard-host") ? vm["dashboard-host"].as<std::string>() : host.empty() ? "0.0.0.0" : host;
      dopt->port = vm["dashboard-port"].as<int>();
      dopt->any_port_if_taken = vm["dashboard-port"].defaulted();
      dopt->tls = dashboard_tls;  // HTTPS with the cluster's certificate
    }
    auto service = start_head_service(sys, hopt, dopt, shown_host);  // actors/services.hpp
    if (!service) {
      ready.failed("tune start: " + service.error().message());
      return 1;
    }
    auto head = service->head;
    hopt.dashboard = service->dashboard_url;
    (*gate)->run([&sys, head, actual] {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        log_line(std::string{"the gate cannot reach the head: socketpair: "} + std::strerror(errno));
        return -1;
      }
      serve_fd(sys, sv[0], head, actual, "gate");  // CAF owns sv[0] from here on
      return sv[1];
    });
    std::string address = shown_host + ":" + std::to_string(actual);
    std::string pid_file = dir + "/head-" + std::to_string(actual) + ".pid";
    if (auto st = cli::write_pid_file(pid_file); !st) {
      ready.failed("tune start: " + st.message());
      caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
      return 1;
    }
    log_line("head listening at " + address + (server_tls ? " with TLS" : "") + " (libtune " + version() + ", pid " +
             std::to_string(::getpid()) + ")");
    // Programs on this machine find it (tune run, tuning scripts without --address).
    local_head here;
    bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
    here.address = (wildcard ? std::string{"127.0.0.1"} : host) + ":" + std::to_string(actual);
    here.port = actual;
    here.pid = ::getpid();
    here.started = process_start_time(here.pid);
    here.uid = ::getuid();
    here.user = user_name(here.uid);
    here.token_file = std::filesystem::absolute(token_path).string();
    here.tls = static_cast<bool>(server_tls);
    here.version = version();
    if (auto a = announce_head(here); !a) log_line("programs on this machine will not find this head: " + a.message());
    ready.ready("tune: head started at " + address + " (pid " + std::to_string(::getpid()) + ")" +
                (server_tls ? " with TLS: every process connects with --tls-cert, --tls-key and --tls-ca" : "") + "\n" +
                "  runtime dir: " + dir + "\n" + (block ? "" : "  log: " + dir + "/head-" + std::to_string(port) + ".log\n") +
                "  token file:  " + token_path + "\n" +
                (hopt.dashboard.empty() ? "" : "  dashboard:   " + hopt.dashboard + " (tune dashboard prints a link that signs in)\n") +
                "  nodes join with: tune start --address " + address + " --token-file " + node_token_path +
                " (the node token; the admin token works too)\n" +
                "  users: tune user add NAME (each gets a token of their own)");
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
  });
}

// --- tune start --address ----------------------------------------------------

expected<node_resources> node_resources_from(const po::variables_map& vm, const host_info& host,
                                             const std::string& node_id) {
  resource_set r;
  quantity cpus = host.cpus;
  if (vm.count("num-cpus")) {
    auto n = quantity::from_double(vm["num-cpus"].as<double>(), "--num-cpus");
    if (!n) return n.error();
    cpus = *n;
  }
  r.set_cpu(cpus).set_memory(host.memory);
  if (vm.count("resources")) {
    auto custom = resource_set::from_json(vm["resources"].as<std::string>());
    if (!custom) return status{errc::invalid_argument, "--resources: " + custom.error().message()};
    if (!custom->cpu().is_zero() || !custom->gpu().is_zero() || custom->memory() || custom->gpu_memory())
      return status{errc::invalid_argument,
                    "--resources is for custom resources; give CPUs with --num-cpus and GPUs with --num-gpus or --gpus"};
    for (auto& [name, q] : custom->customs()) r.set_custom(name, q);
  }
  std::vector<gpu_instance> gpus = host.gpu.gpus;
  if (vm.count("gpus") && vm.count("num-gpus"))
    return status{errc::invalid_argument, "give --gpus or --num-gpus, not both"};
  if (vm.count("gpus")) {
    if (gpus.empty())
      return status{errc::invalid_argument, "--gpus: this machine has no GPU (" + host.gpu.note +
                                                "); --num-gpus N declares N logical GPUs"};
    std::vector<gpu_instance> chosen;
    std::stringstream list{vm["gpus"].as<std::string>()};
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
        return status{errc::invalid_argument, "--gpus '" + vm["gpus"].as<std::string>() +
                                                  "': give GPU indices separated by commas, e.g. 0,2"};
      int index = std::stoi(item);
      if (index >= static_cast<int>(gpus.size()))
        return status{errc::invalid_argument, "--gpus: there is no GPU " + item + "; this machine has " +
                                                  std::to_string(gpus.size()) + " (0.." +
                                                  std::to_string(gpus.size() - 1) + ")"};
      for (auto& c : chosen)
        if (c.index == index) return status{errc::invalid_argument, "--gpus: GPU " + item + " is listed twice"};
      chosen.push_back(gpus[static_cast<size_t>(index)]);
    }
    gpus = chosen;
  } else if (vm.count("num-gpus")) {
    auto chosen = first_gpus(gpus, vm["num-gpus"].as<int>(), node_id, "--num-gpus");
    if (!chosen) return chosen.error();
    gpus = std::move(chosen).value();
  }
  return node_resources::make(r, gpus);
}

int start_node(const po::variables_map& vm, const std::string& dir) {
  auto head = parse_host_port(vm["address"].as<std::string>(), "--address");
  if (!head) return fail("start", head.error().message(), 2);
  if (vm.count("host")) return fail("start", "--host is for the head (--head)", 2);
  if (!vm["port"].defaulted()) return fail("start", "--port is for the head; a node connects to --address", 2);
  if (!vm["orphan-grace"].defaulted()) return fail("start", "--orphan-grace is for the head (--head)", 2);
  for (auto opt : {"dashboard-host", "no-dashboard"})
    if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for the head (--head)", 2);
  if (!vm["dashboard-port"].defaulted()) return fail("start", "--dashboard-port is for the head (--head)", 2);
  auto token_path = vm["token-file"].as<std::string>();
  auto token = read_token(token_path);
  if (!token) return fail("start", token.error().message());
  if (!token->warning.empty()) std::cerr << "tune: warning: " << token->warning << "\n";
  if (int rc = use_client_tls("start", vm); rc >= 0) return rc;
  auto host = detect_host();
  if (!host.gpu.error.empty()) return fail("start", host.gpu.error, 2);
  std::string id = random_node_id();
  auto resources = node_resources_from(vm, host, id);
  if (!resources) return fail("start", resources.error().message(), 2);
  auto others = parse_others_policy(vm.count("foreign-threshold") ? vm["foreign-threshold"].as<std::string>() : "",
                                    vm.count("foreign-margin") ? vm["foreign-margin"].as<std::string>() : "",
                                    "--foreign-threshold", "--foreign-margin");
  if (!others) return fail("start", others.error().message(), 2);
  int audit_ms = vm["gpu-audit-ms"].as<int>();
  if (auto s = check_gpu_audit_ms(audit_ms, "--gpu-audit-ms"); !s) return fail("start", s.message(), 2);
  auto containment_mode = vm["containment"].as<std::string>();
  if (containment_mode != "auto" && containment_mode != "cgroup" && containment_mode != "subreaper")
    return fail("start", "--containment " + containment_mode + ": use auto, cgroup or subreaper", 2);
  std::vector<std::string> require_limits;
  if (vm.count("require-limits"))
    for (std::stringstream list(vm["require-limits"].as<std::string>()); list.good();) {
      std::string r;
      std::getline(list, r, ',');
      if (r.empty()) continue;
      if (r != "memory" && r != "cpu" && r != "pids")
        return fail("start", "--require-limits: \"" + r + "\" is not a limit; give a list of memory, cpu, pids", 2);
      require_limits.push_back(r);
    }
  auto max_pids = vm["trial-max-pids"].as<int64_t>();
  if (auto s = check_trial_max_pids(max_pids, "--trial-max-pids"); !s) return fail("start", s.message(), 2);
  std::string trial_user = vm.count("trial-user") ? vm["trial-user"].as<std::string>() : "";
  bool block = vm.count("block") > 0;
  std::string log_file = dir + "/" + id + ".log";
  return cli::run_service(block, log_file, 30, [&](cli::readiness& ready) {
    auto signals = service_signals();
    // The spawner and the trials' containment, before CAF's threads (actors/services.hpp);
    // they end after the actor system, killing whatever is left.
    auto host_parts = open_node_host({id, containment_mode, require_limits, trial_user});
    if (!host_parts) {
      ready.failed("tune start: " + host_parts.error().message());
      return 2;
    }
    wire::config cfg;
    caf::actor_system sys{cfg};
    auto first = std::make_shared<std::promise<status>>();
    auto fatal_message = std::make_shared<std::string>();
    node_options opt;
    opt.head_host = head->host;
    opt.head_port = head->port;
    opt.token = token->token;
    opt.node_id = id;
    opt.hostname = host.hostname;
    opt.address = local_address_towards(head->host, head->port);
    opt.resources = *resources;
    opt.work_dir = dir + "/" + id;  // programs/ and trials/ of this node
    fill_node_options(opt, *host_parts, audit_ms, max_pids);
    opt.others = *others;
    if (auto s = check_trial_folder(opt); !s) {
      ready.failed("tune start: " + s.message());
      return 2;
    }
    opt.on_first_join = [first](const status& st) { first->set_value(st); };
    opt.on_fatal = [fatal_message](const status& st) {
      *fatal_message = st.message();
      ::kill(::getpid(), SIGUSR1);
    };
    log_line("node " + id + " on " + host.hostname + ": " + resources->total().to_string() +
             (host.gpu.gpus.empty() && !resources->gpus().empty() ? " (logical GPUs)" : ""));
    for (auto& g : resources->gpus())
      log_line("  gpu " + std::to_string(g.index) + ": " + g.name + ", " + format_bytes(g.memory_total) + ", " + g.uuid +
               (g.logical ? " (logical)" : ""));
    bool real_cards = std::any_of(resources->gpus().begin(), resources->gpus().end(), [](auto& g) { return !g.logical; });
    std::unique_ptr<mps_daemon> mps;
    if (vm.count("mps")) {
      if (!real_cards) {
        ready.failed("tune start: --mps needs real GPUs (this node has " +
                     std::string{resources->gpus().empty() ? "none" : "logical ones only"} + ")");
        return 2;
      }
      std::vector<std::string> uuids;
      for (auto& g : resources->gpus()) uuids.push_back(g.uuid);
      auto m = mps_daemon::start(opt.work_dir + "/mps", uuids, opt.trial_env);
      if (!m) {
        ready.failed("tune start: cannot start CUDA MPS: " + m.error().message());
        return 1;
      }
      mps = std::move(m).value();
      for (auto& [k, v] : mps->client_env()) opt.trial_env[k] = v;
      log_line("CUDA MPS on (daemon pid " + std::to_string(mps->pid()) + ")");
    }
    auto node = spawn_node(sys, opt);
    auto joined = first->get_future();
    if (joined.wait_for(std::chrono::seconds(25)) != std::future_status::ready) {
      ready.failed("tune start: no answer from the head at " + head->to_string() + " in 25 s");
      exit_watchdog(std::chrono::seconds(5));
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      return 1;
    }
    auto st = joined.get();
    if (!st) {
      ready.failed("tune start: " + st.message());
      exit_watchdog(std::chrono::seconds(5));
      return 1;
    }
    std::string pid_file = dir + "/" + id + ".pid";
    if (auto w = cli::write_pid_file(pid_file); !w) {
      ready.failed("tune start: " + w.message());
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
      return 1;
    }
    std::string gpus;
    for (auto& g : resources->gpus()) gpus += "\n  gpu " + std::to_string(g.index) + ": " + g.name + ", " + g.uuid + (g.logical ? " (logical)" : "");
    ready.ready("tune: node " + id + " joined the head at " + head->to_string() + " (pid " + std::to_string(::getpid()) +
                ")\n  resources: " + resources->total().to_string() + gpus + "\n  runtime dir: " + dir +
                (block ? "" : "\n  log: " + log_file));
    int sig = 0;
    sigwait(&signals, &sig);
    int rc = 0;
    exit_watchdog(std::chrono::seconds(10));
    if (sig == SIGUSR1) {
      log_line("stopping: " + *fatal_message);
      rc = 1;
    } else {
      log_line(std::string{"stopping ("} + strsignal(sig) + "); leaving the cluster");
      caf::scoped_actor self{sys};
      self->request(node, std::chrono::seconds(3), wire::leave_atom::value)
          .receive([](wire::leave_atom, bool) {}, [](caf::error&) { log_line("the head did not answer the goodbye"); });
    }
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    ::unlink(pid_file.c_str());
    return rc;
  });
}

int cmd_start(const std::vector<std::string>& args) {
  po::options_description desc("tune start options");
  desc.add_options()
      ("help,h", "show this help")
      ("head", "start the head of a new cluster")
      ("address", po::value<std::string>(), "HOST:PORT of the head to join (start a node)")
      ("port", po::value<int>()->default_value(default_port), "head: the port to listen on (0: any free port)")
      ("host", po::value<std::string>(), "head: the address to listen on (default: all)")
      ("dashboard-port", po::value<int>()->default_value(8265),
       "head: the web dashboard's port (0: any free port; the default, if taken, becomes any free port)")
      ("dashboard-host", po::value<std::string>(), "head: the address the dashboard listens on (default: --host, else all)")
      ("no-dashboard", "head: serve no dashboard (nor /metrics)")
      ("orphan-grace", po::value<double>()->default_value(60),
       "head: seconds to keep bundles that nodes hold for placement groups this head does not know "
       "(after a head restart), for their owners to claim by creating the group again")
      ("num-gpus", po::value<int>(), "node: use the first N GPUs; on a machine without GPUs, declare N logical ones (16 GiB each)")
      ("gpus", po::value<std::string>(), "node: use these GPUs only, by index (e.g. 0,2)")
      ("num-cpus", po::value<double>(), "node: the CPUs to offer (default: those this process may use)")
      ("resources", po::value<std::string>(), "node: custom resources as JSON, e.g. '{\"tpu\": 2}'")
      ("mps", "node: run trials sharing a card under CUDA MPS (a daemon of this node's own): their kernels run "
              "side by side instead of time-sliced, and each trial's memory quota is enforced when it allocates")
      ("containment", po::value<std::string>()->default_value("auto"),
       "node: how trials are contained: auto (each in a cgroup of its own where the node can make them: as root, "
       "or under systemd with Delegate=yes; else a subreaper), cgroup (cgroups or refuse to start), subreaper")
      ("require-limits", po::value<std::string>(),
       "node: host limits it must enforce, or refuse to start: a list of memory, cpu, pids (e.g. memory,cpu)")
      ("trial-max-pids", po::value<int64_t>()->default_value(16384),
       "node: each trial's limit of processes and threads (pids.max; 0: none), against fork bombs")
      ("trial-user", po::value<std::string>(),
       "node: the Unix account trials run as when the node runs as root (default: nobody; never root); a user's "
       "own account (tune user set NAME --account A) takes its place for that user's trials")
      ("gpu-audit-ms", po::value<int>()->default_value(200),
       "node: how often the GPU audit (NVML) looks at what runs on the cards, in ms; 0 turns it off")
      ("foreign-threshold", po::value<std::string>(),
       "node: a card where programs that are not this cluster's hold more GPU memory than this is never given "
       "whole (default 256MiB: less than a CUDA context)")
      ("foreign-margin", po::value<std::string>(),
       "node: GPU memory kept free beside what other programs hold on a card, for them to grow (default 1GiB)")
      ("token-file", po::value<std::string>()->default_value(default_token_file()),
       "the cluster token (the head creates it if missing; copy it to every node)")
      ("runtime-dir", po::value<std::string>()->default_value(""),
       "where pid and log files go (default: $TUNE_RUNTIME_DIR, $XDG_RUNTIME_DIR/libtune or /tmp/libtune-UID)")
      ("block", "stay in the foreground (for systemd, Slurm) instead of running as a daemon");
  add_tls_options(desc);
  po::variables_map vm;
  if (int rc = parse("start", args, desc, "tune start --head | --address HOST:PORT [options]", vm); rc >= 0) return rc;
  bool head = vm.count("head") > 0, node = vm.count("address") > 0;
  if (head == node) return fail("start", "give --head (start a head) or --address HOST:PORT (start a node that joins it)", 2);
  auto dir = cli::runtime_dir(vm["runtime-dir"].as<std::string>());
  if (!dir) return fail("start", dir.error().message());
  if (head) {
    if (!vm["gpu-audit-ms"].defaulted()) return fail("start", "--gpu-audit-ms is for a node (--address)", 2);
    for (auto opt : {"containment", "trial-max-pids"})
      if (!vm[opt].defaulted()) return fail("start", std::string{"--"} + opt + " is for a node (--address)", 2);
    if (vm.count("require-limits")) return fail("start", "--require-limits is for a node (--address)", 2);
    if (vm.count("trial-user")) return fail("start", "--trial-user is for a node (--address)", 2);
    if (vm.count("mps")) return fail("start", "--mps is for a node (--address)", 2);
    for (auto opt : {"foreign-threshold", "foreign-margin"})
      if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for a node (--address)", 2);
    for (auto opt : {"num-gpus", "gpus", "num-cpus", "resources"})
      if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for a node (--address); the head runs no trials", 2);
    return start_head(vm, *dir);
  }
  return start_node(vm, *dir);
}

// --- talking to a head: tune status, tune group --------------------------------

// Options every command that talks to a head takes.
void add_client_options(po::options_description& desc) {
  desc.add_options()
      ("address", po::value<std::string>(), "HOST:PORT of the head (default: $TUNE_ADDRESS)")
      ("token-file", po::value<std::string>()->default_value(default_token_file()), "the cluster token")
      ("timeout", po::value<double>()->default_value(5.0), "seconds to wait for the head");
  add_tls_options(desc);
}

// A client connected to the head the options name, or the exit code after a message.
struct connected {
  std::unique_ptr<wire::config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<cluster_client> client;
  std::string where;
};

std::variant<connected, int> connect_head(const std::string& command, const po::variables_map& vm,
                                           std::chrono::milliseconds extra_wait = {}) {
  std::string address = vm.count("address") ? vm["address"].as<std::string>() : "";
  if (address.empty())
    if (const char* e = std::getenv("TUNE_ADDRESS")) address = e;
  if (address.empty()) return fail(command, "give --address HOST:PORT of the head (or set TUNE_ADDRESS)", 2);
  auto head = parse_host_port(address, "--address");
  if (!head) return fail(command, head.error().message(), 2);
  double timeout_s = vm["timeout"].as<double>();
  if (!(timeout_s > 0 && timeout_s <= 3600)) return fail(command, "--timeout must be between 0 and 3600 seconds", 2);
  auto token = read_token(vm["token-file"].as<std::string>());
  if (!token) return fail(command, token.error().message());
  if (int rc = use_client_tls(command, vm); rc >= 0) return rc;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  // Connecting to an address that never answers can block inside CAF: end the process
  // with a clear error instead of hanging.
  std::thread([command, limit = timeout + extra_wait, where = head->to_string()] {
    std::this_thread::sleep_for(limit + std::chrono::seconds(2));
    std::cerr << "tune " << command << ": no answer from " << where << " in time (is a head running there?)\n";
    std::_Exit(1);
  }).detach();
  connected c;
  c.cfg = std::make_unique<wire::config>();
  c.sys = std::make_unique<caf::actor_system>(*c.cfg);
  c.where = head->to_string();
  auto client = cluster_client::connect(*c.sys, head->host, head->port, token->token, timeout);
  if (!client) return fail(command, client.error().message());
  c.client = std::move(client).value();
  return c;
}

// Ends the process at once: nothing to clean up, and CAF's shutdown would wait.
[[noreturn]] void finish(int rc) {
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(rc);
}

// --- tune dashboard ------------------------------------------------------------

int cmd_dashboard(const std::vector<std::string>& args) {
  po::options_description desc("tune dashboard options");
  desc.add_options()("help,h", "show this help")("url-only", "print only the address, without the token");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("dashboard", args, desc, "tune dashboard --address HOST:PORT [--url-only]", vm, nullptr,
                     "Prints the web dashboard's address, and a link that signs in with the cluster token (keep it "
                     "as private as the token file). The head serves it on --dashboard-port (default 8265).");
      rc >= 0)
    return rc;
  auto c = connect_head("dashboard", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->status_json();
  if (!text) finish(fail("dashboard", "the head at " + conn.where + ": " + text.error().message()));
  auto j = nlohmann::json::parse(*text, nullptr, false);
  std::string url = j.is_object() && j.contains("head") ? j["head"].value("dashboard", "") : "";
  if (url.empty())
    finish(fail("dashboard", "the head at " + conn.where + " serves no dashboard (it was started with --no-dashboard)"));
  if (vm.count("url-only")) {
    std::cout << url << "\n";
    finish(0);
  }
  auto token = read_token(vm["token-file"].as<std::string>());
  std::cout << "dashboard: " << url << "\n";
  if (token) std::cout << "signed in: " << url << "?token=" << token->token << "  (contains the cluster token)\n";
  std::cout << "metrics:   " << url << "metrics  (Authorization: Bearer <token>)\n";
  finish(0);
}

int cmd_status(const std::vector<std::string>& args) {
  po::options_description desc("tune status options");
  desc.add_options()("help,h", "show this help")("json", "print one JSON object instead of text");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("status", args, desc, "tune status --address HOST:PORT [--json]", vm); rc >= 0) return rc;
  auto c = connect_head("status", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->status_json();
  if (!text) finish(fail("status", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto rendered = render_status_text(*text);
  if (!rendered) finish(fail("status", rendered.error().message()));
  std::cout << *rendered;
  finish(0);
}

// `tune rebalance`: the head evens the GPU load across nodes; the trials it moves are
// paused, and started again from their checkpoints on emptier nodes by their experiments.
int cmd_rebalance(const std::vector<std::string>& args) {
  po::options_description desc("tune rebalance options");
  desc.add_options()("help,h", "show this help")("json", "print the plan as one JSON object");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("rebalance", args, desc, "tune rebalance --address HOST:PORT [--json]", vm); rc >= 0) return rc;
  auto c = connect_head("rebalance", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->rebalance();
  if (!text) finish(fail("rebalance", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto j = nlohmann::json::parse(*text);
  if (j["moves"].empty()) std::cout << "tune rebalance: the load is even (within one trial's share); nothing to move\n";
  for (auto& m : j["moves"])
    std::cout << "moving placement group " << m["group"].get<std::string>() << " (" << m["gpu"].get<double>()
              << " GPU) from " << m["from"].get<std::string>() << " to " << m["to"].get<std::string>() << "\n";
  for (auto& [n, l] : j["load"].items()) std::cout << "  " << n << ": " << static_cast<int>(l.get<double>() * 100 + 0.5) << "% of its GPUs allocated before\n";
  finish(0);
}

// `tune drain NODE`: nothing new goes to the node and the trials on it move elsewhere
// (paused, started again from their checkpoints); `--undo` lets it take work again.
int cmd_drain(const std::vector<std::string>& args) {
  po::options_description desc("tune drain options");
  desc.add_options()("help,h", "show this help")("node", po::value<std::string>(), "the node's id (tune status shows it)")(
      "undo", "let the node take new work again")("json", "print the answer as one JSON object");
  add_client_options(desc);
  po::positional_options_description pos;
  pos.add("node", 1);
  po::variables_map vm;
  if (int rc = parse("drain", args, desc, "tune drain NODE --address HOST:PORT [--undo]", vm, &pos); rc >= 0) return rc;
  if (!vm.count("node")) return fail("drain", "say which node: tune drain NODE --address HOST:PORT", 2);
  auto node = vm["node"].as<std::string>();
  auto c = connect_head("drain", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  bool on = !vm.count("undo");
  auto text = conn.client->drain(node, on);
  if (!text) finish(fail("drain", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto j = nlohmann::json::parse(*text);
  if (!on) {
    std::cout << "tune drain: node " << node << " takes new work again\n";
    finish(0);
  }
  std::cout << "tune drain: node " << node << " takes no new work; " << j["moves"].size()
            << " placement group(s) asked to move off it\n";
  for (auto& s : j["stays"])
    std::cout << "  stays: " << s["group"].get<std::string>() << " (" << s["why"].get<std::string>() << ")\n";
  finish(0);
}

// Where each bundle of a group sits, one line each.
void print_group(const group_info& g) {
  std::cout << "placement group " << g.id << ": " << g.state << " (" << g.strategy
            << (g.detached ? ", detached" : "") << ")\n";
  if (!g.reason.empty()) std::cout << "  " << g.reason << "\n";
  for (auto& b : g.bundles) {
    std::cout << "  bundle " << b.index << "  " << b.request << "  ";
    if (b.node.empty()) {
      std::cout << "not placed\n";
      continue;
    }
    std::cout << b.state << " on " << b.node << (b.hostname.empty() ? "" : " (" + b.hostname + ")");
    for (auto& gpu : b.gpus)
      std::cout << "\n    gpu " << gpu.index << " " << gpu.uuid << (gpu.pci_bus_id.empty() ? "" : " " + gpu.pci_bus_id)
                << " share " << gpu.share << ", " << format_bytes(gpu.memory) << (gpu.logical ? " (logical)" : "");
    std::cout << "\n";
  }
}

int cmd_group(const std::vector<std::string>& args) {
  const char* group_usage =
      "usage: tune group <create|get|remove> [options]\n"
      "\n"
      "  create --bundles JSON [--strategy S] [--id ID] [--wait SECONDS]\n"
      "         reserve bundles across nodes, all at once or not at all. JSON is a list of\n"
      "         resource sets, e.g. '[{\"gpu\": 1, \"cpu\": 4}, {\"gpu\": 1}]'; S is PACK (default),\n"
      "         SPREAD, STRICT_PACK or STRICT_SPREAD. The group outlives this command: remove it\n"
      "         with `tune group remove ID`.\n"
      "  get ID      where each bundle sits: node, GPU indices, UUIDs, PCI bus ids, memory\n"
      "  remove ID   release everything the group holds\n"
      "\n"
      "Every subcommand takes --address HOST:PORT, --token-file F, --timeout S and --json.\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << group_usage;
    return args.empty() ? 2 : 0;
  }
  std::string sub = args[0];
  if (sub != "create" && sub != "get" && sub != "remove") {
    std::cerr << "tune group: unknown subcommand '" << sub << "'\n\n" << group_usage;
    return 2;
  }
  std::string command = "group " + sub;
  po::options_description desc("tune " + command + " options");
  desc.add_options()("help,h", "show this help")("json", "print JSON instead of text");
  if (sub == "create")
    desc.add_options()
        ("bundles", po::value<std::string>(), "the bundles, a JSON list of resource sets")
        ("strategy", po::value<std::string>()->default_value("PACK"), "PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
        ("id", po::value<std::string>()->default_value(""), "the group's id (default: the head names it)")
        ("wait", po::value<double>()->default_value(0), "seconds to wait until it is placed (0: do not wait)");
  else
    desc.add_options()("group", po::value<std::string>(), "the group's id");
  add_client_options(desc);
  po::positional_options_description pos;
  if (sub != "create") pos.add("group", 1);
  po::variables_map vm;
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    po::store(po::command_line_parser(rest).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return fail(command, std::string{e.what()} + " (see tune " + command + " --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << "usage: tune " << command << (sub == "create" ? " --bundles JSON" : " ID") << " --address HOST:PORT\n\n"
              << desc;
    return 0;
  }
  bool json_out = vm.count("json") > 0;
  if (sub == "create") {
    if (!vm.count("bundles")) return fail(command, "give --bundles, e.g. '[{\"gpu\": 1}]'", 2);
    group_request req;
    auto strat = parse_strategy(vm["strategy"].as<std::string>());
    if (!strat) return fail(command, strat.error().message(), 2);
    req.strat = *strat;
    req.id = vm["id"].as<std::string>();
    req.detached = true;
    auto list = nlohmann::json::parse(vm["bundles"].as<std::string>(), nullptr, false);
    if (list.is_discarded() || !list.is_array() || list.empty())
      return fail(command, "--bundles must be a non-empty JSON list of resource sets, e.g. '[{\"gpu\": 1}]'", 2);
    for (size_t i = 0; i < list.size(); ++i) {
      auto r = resource_set::from_json(list[i].dump());
      if (!r) return fail(command, "bundle " + std::to_string(i) + ": " + r.error().message(), 2);
      req.bundles.push_back(*r);
    }
    double wait_s = vm["wait"].as<double>();
    if (!(wait_s >= 0 && wait_s <= 86400)) return fail(command, "--wait must be between 0 and 86400 seconds", 2);
    auto wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
    auto c = connect_head(command, vm, wait);
    if (auto* rc = std::get_if<int>(&c)) return *rc;
    auto& client = *std::get<connected>(c).client;
    auto made = client.create_group(req);
    if (!made) finish(fail(command, made.error().message()));
    if (made->state == "infeasible") finish(fail(command, "placement group " + made->id + " can never be placed: " + made->reason));
    if (wait.count() == 0) {
      if (json_out) std::cout << json_text(nlohmann::json{{"id", made->id}, {"state", made->state}, {"reason", made->reason}}) << "\n";
      else std::cout << made->id << " " << made->state << (made->reason.empty() ? "" : ": " + made->reason) << "\n";
      finish(0);
    }
    auto ready = client.wait_ready(made->id, wait);
    if (!ready) finish(fail(command, ready.error().message() + " (the group stays; remove it with `tune group remove " + made->id + "`)"));
    if (json_out) {
      auto j = client.get_group_json(made->id);
      if (!j) finish(fail(command, j.error().message()));
      std::cout << *j << "\n";
    } else {
      print_group(*ready);
    }
    finish(0);
  }
  if (!vm.count("group")) return fail(command, "give the group's id (see tune group get --help)", 2);
  auto id = vm["group"].as<std::string>();
  auto c = connect_head(command, vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& client = *std::get<connected>(c).client;
  if (sub == "remove") {
    auto st = client.remove_group(id);
    if (!st) finish(fail(command, st.message()));
    if (json_out) std::cout << json_text(nlohmann::json{{"id", id}, {"state", "removed"}}) << "\n";
    else std::cout << "removed placement group " << id << "\n";
    finish(0);
  }
  if (json_out) {
    auto j = client.get_group_json(id);
    if (!j) finish(fail(command, j.error().message()));
    std::cout << *j << "\n";
    finish(0);
  }
  auto g = client.get_group(id);
  if (!g) finish(fail(command, g.error().message()));
  print_group(*g);
  finish(0);
}

// --- tune stop -------------------------------------------------------------------

// --- tune user ------------------------------------------------------------------

// The settings options of `tune user add/set` as the head's JSON (only those given).
expected<nlohmann::json> user_settings(const po::variables_map& vm) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* q : {"gpus", "cpus"})
    if (vm.count(q)) {
      auto v = vm[q].as<std::string>();
      auto amount = quantity::parse(v, std::string{"--"} + q);
      if (v == "none") j[q] = nullptr;
      else if (!amount)
        return status{errc::invalid_argument, "--" + std::string{q} + " " + v + ": give a number of " + q +
                                                  " (2, 0.5, ...) or none (no quota)"};
      else j[q] = amount->to_double();
    }
  if (vm.count("max-trials")) j["max_trials"] = vm["max-trials"].as<int64_t>();
  if (vm.count("priority")) j["priority"] = vm["priority"].as<int64_t>();
  if (vm.count("weight")) j["weight"] = vm["weight"].as<double>();
  if (vm.count("account")) j["account"] = vm["account"].as<std::string>();
  return j;
}

std::string quota_text(const nlohmann::json& v) { return v.is_null() ? "no limit" : json_text(v); }

void print_user(const nlohmann::json& u) {
  std::cout << u["name"].get<std::string>() << ": gpus " << quota_text(u["gpus"]) << ", cpus " << quota_text(u["cpus"])
            << ", trials at once " << quota_text(u["max_trials"]) << ", priority " << u["priority"] << ", weight "
            << u["weight"] << ", trials run as "
            << (u["account"].get<std::string>().empty() ? std::string{"the node's --trial-user"} : u["account"].get<std::string>())
            << "\n";
}

// `tune user add|set|list|remove|token`: the admin manages the cluster's users on the
// head (docs/users.md); each user's token goes to a file of its own, mode 0600.
int cmd_user(const std::vector<std::string>& args) {
  const char* about =
      "  add NAME [settings] [--out FILE]   a new user; their token goes to FILE (default: users/NAME.token\n"
      "                                     beside the admin token), mode 0600: give it to them\n"
      "  set NAME [settings]                change a user's settings\n"
      "  list [--json]                      every user and their settings\n"
      "  remove NAME                        the user's token stops working at once\n"
      "  token NAME [--out FILE] [--new]    write the user's token to FILE again (--new: a new token;\n"
      "                                     the old one stops working)\n"
      "settings: --gpus N (whole cards and shares, exactly; none: no quota), --cpus N, --max-trials N,\n"
      "--priority P (higher preempts lower), --weight W (fair share), --account UNIX_USER (what the\n"
      "user's trials run as). Only the admin (the head's own token) manages users.\n";
  po::options_description desc("tune user options");
  desc.add_options()("help,h", "show this help")("op", po::value<std::string>(), "add, set, list, remove or token")(
      "name", po::value<std::string>(), "the user")("gpus", po::value<std::string>(), "GPU quota (none: no quota)")(
      "cpus", po::value<std::string>(), "CPU quota (none: no quota)")("max-trials", po::value<int64_t>(), "trials at once")(
      "priority", po::value<int64_t>(), "priority (default 0)")("weight", po::value<double>(), "fair-share weight (default 1)")(
      "account", po::value<std::string>(), "Unix account of the user's trials")("out", po::value<std::string>(),
                                                                                  "where the user's token goes")(
      "new", "token: make a new token")("json", "print JSON");
  add_client_options(desc);
  po::positional_options_description pos;
  pos.add("op", 1).add("name", 1);
  po::variables_map vm;
  if (int rc = parse("user", args, desc, "tune user <add|set|list|remove|token> [NAME] [options] --address HOST:PORT", vm,
                     &pos, about);
      rc >= 0)
    return rc;
  if (!vm.count("op")) return fail("user", "say what to do: tune user add|set|list|remove|token (tune user --help)", 2);
  const auto op = vm["op"].as<std::string>();
  if (op != "add" && op != "set" && op != "list" && op != "remove" && op != "token")
    return fail("user", "\"" + op + "\" is not add, set, list, remove or token (tune user --help)", 2);
  if (op != "list" && !vm.count("name")) return fail("user", "say which user: tune user " + op + " NAME", 2);
  auto settings = user_settings(vm);
  if (!settings) return fail("user", settings.error().message(), 2);
  if (op != "add" && op != "set" && !settings->empty())
    return fail("user", "--gpus, --cpus, --max-trials, --priority, --weight and --account are for add and set", 2);
  auto body = op == "add" || op == "set" ? *settings : nlohmann::json::object();
  if (op == "set" && body.empty()) return fail("user", "say what to change: --gpus, --cpus, --max-trials, --priority, --weight or --account", 2);
  if (vm.count("name")) body["name"] = vm["name"].as<std::string>();
  if (op == "token" && vm.count("new")) body["new"] = true;
  auto out_file = vm.count("out") ? vm["out"].as<std::string>()
                                  : user_token_file_beside(vm["token-file"].as<std::string>(),
                                                           vm.count("name") ? vm["name"].as<std::string>() : "");
  auto c = connect_head("user", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->manage_users(op == "token" ? "token" : op, json_text(body));
  if (!text) finish(fail("user", text.error().message()));
  auto j = nlohmann::json::parse(*text);
  if (j.is_object() && j.contains("token")) {  // add, token: the user's token to its file
    auto written = write_token_file(out_file, j["token"].get<std::string>());
    if (!written) finish(fail("user", written.message()));
    j.erase("token");
  }
  if (vm.count("json")) {
    std::cout << json_text(j) << "\n";
    finish(0);
  }
  if (op == "list") {
    if (j.empty()) std::cout << "no users yet: tune user add NAME (only the admin token acts until then)\n";
    for (auto& u : j) print_user(u);
  } else if (op == "remove") {
    std::cout << "removed user " << j["name"].get<std::string>() << ": their token no longer works\n";
  } else {
    if (op == "add") std::cout << "added ";
    print_user(j);
    if (op == "add" || op == "token")
      std::cout << "their token is in " << out_file << " (mode 0600): give it to " << j["name"].get<std::string>()
                << ", who passes it as --token-file (or puts it in ~/.tune/token)\n";
  }
  finish(0);
}

int cmd_stop(const std::vector<std::string>& args) {
  po::options_description desc("tune stop options");
  desc.add_options()
      ("help,h", "show this help")
      ("runtime-dir", po::value<std::string>()->default_value(""), "where `tune start` put its pid files")
      ("grace", po::value<int>()->default_value(10), "seconds to wait for a clean stop before killing");
  po::variables_map vm;
  if (int rc = parse("stop", args, desc, "tune stop [--runtime-dir DIR]", vm); rc >= 0) return rc;
  auto dir = cli::runtime_dir(vm["runtime-dir"].as<std::string>());
  if (!dir) return fail("stop", dir.error().message());
  auto done = cli::stop_all(*dir, std::max(0, vm["grace"].as<int>()));
  if (done.empty()) std::cout << "tune stop: nothing running from " << *dir << "\n";
  for (auto& s : done)
    std::cout << "tune: stopped " << s.name << " (pid " << s.pid << ")" << (s.forced ? ", killed after the grace period" : "") << "\n";
  return 0;
}

// Runs an experiment's tuning program again, as it was started (same program, same
// arguments, same folder), with TUNE_RESUME_DIR set: its fit() then continues the
// experiment (tune_config::resume) instead of starting a new one.
int cmd_resume(const std::vector<std::string>& args) {
  po::options_description desc("tune resume options");
  desc.add_options()
      ("help,h", "show this help")
      ("dir", po::value<std::string>(), "the experiment's folder (what fit() wrote: tune_results/<name>-<time>)")
      ("print", "print the command it would run; run nothing");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (int rc = parse("resume", args, desc, "tune resume DIR [--print]", vm, &pos,
                     "Continues an experiment whose tuning program died: completed trials and stored results\n"
                     "are kept, trials that were running start again from their latest checkpoint.");
      rc >= 0)
    return rc;
  if (!vm.count("dir")) return fail("resume", "say which experiment: tune resume DIR", 2);
  namespace fs = std::filesystem;
  std::error_code ec;
  auto dir = fs::absolute(vm["dir"].as<std::string>(), ec).lexically_normal().string();
  if (!dir.empty() && dir.back() == '/') dir.pop_back();
  if (!fs::exists(dir + "/experiment.db"))
    return fail("resume", "no experiment in " + dir + " (it has no experiment.db): give the folder fit() wrote");
  auto store = experiment_store::open(dir);
  if (!store) return fail("resume", store.error().message());
  auto command = (*store)->meta("command");
  if (!command) return fail("resume", command.error().message());
  if (!command->is_object() || !(*command)["argv"].is_array() || (*command)["argv"].empty() ||
      !(*command)["exe"].is_string())
    return fail("resume", dir + " does not say how its program was run; run that program again with "
                               "tune_config::resume = true and experiment_dir = " + dir);
  std::string exe = (*command)["exe"], cwd = command->value("cwd", "/");
  std::vector<std::string> argv;
  for (auto& a : (*command)["argv"]) argv.push_back(a.is_string() ? a.get<std::string>() : json_text(a));
  std::string shown;
  for (auto& a : argv) shown += (shown.empty() ? "" : " ") + a;
  if (vm.count("print")) {
    std::cout << "cd " << cwd << " && TUNE_RESUME_DIR=" << dir << " " << shown << "\n";
    return 0;
  }
  if (::access(exe.c_str(), X_OK) != 0)
    return fail("resume", "its program " + exe + " is gone or not executable: build it again there, or run your "
                          "program with tune_config::resume = true and experiment_dir = " + dir);
  if (::chdir(cwd.c_str()) != 0) return fail("resume", "cannot enter " + cwd + ", where it ran: " + std::strerror(errno));
  ::setenv("TUNE_RESUME_DIR", dir.c_str(), 1);
  store->reset();
  std::cerr << "tune resume: running " << shown << " (in " << cwd << ")\n";
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(exe.c_str(), cargv.data());
  return fail("resume", "cannot run " + exe + ": " + std::strerror(errno));
}

// --- tune tls -------------------------------------------------------------------

int cmd_tls(const std::vector<std::string>& args) {
  const char* about =
      "  init DIR [--host NAME]... [--days N] [--force]\n"
      "      makes DIR/ca.crt (the cluster's CA), DIR/ca.key, DIR/cluster.crt and DIR/cluster.key\n"
      "      (keys 0600) for a test or small cluster: every process of the cluster is started with\n"
      "      --tls-cert DIR/cluster.crt --tls-key DIR/cluster.key --tls-ca DIR/ca.crt (or the\n"
      "      TUNE_TLS_CERT, TUNE_TLS_KEY and TUNE_TLS_CA variables). --host adds a name or address\n"
      "      to the certificate (localhost, 127.0.0.1 and ::1 are always in it); peers are checked\n"
      "      against the CA, not by name. Existing files are kept unless --force.";
  po::options_description desc("tune tls options");
  desc.add_options()("help,h", "show this help")("op", po::value<std::string>(), "init")(
      "dir", po::value<std::string>(), "where the files go")("host", po::value<std::vector<std::string>>(),
                                                              "a name or address the certificate names (repeatable)")(
      "days", po::value<int>()->default_value(825), "how long the certificates are valid")(
      "force", "replace files that exist");
  po::positional_options_description pos;
  pos.add("op", 1).add("dir", 1);
  po::variables_map vm;
  if (int rc = parse("tls", args, desc, "tune tls init DIR [options]", vm, &pos, about); rc >= 0) return rc;
  if (!vm.count("op") || vm["op"].as<std::string>() != "init")
    return fail("tls", "say what to do: tune tls init DIR (tune tls --help)", 2);
  if (!vm.count("dir")) return fail("tls", "say where: tune tls init DIR", 2);
  tls::init_options opt;
  opt.dir = vm["dir"].as<std::string>();
  opt.days = vm["days"].as<int>();
  opt.force = vm.count("force") > 0;
  if (vm.count("host")) opt.hosts = vm["host"].as<std::vector<std::string>>();
  auto made = tls::init(opt);
  if (!made) return fail("tls", made.error().message(), made.error().code() == errc::already_exists ? 1 : 2);
  std::cout << "tune: " << *made << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << usage;
    return 2;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << usage;
    return 0;
  }
  if (command == "--version" || command == "version") {
    std::cout << "libtune " << version() << "\n";
    return 0;
  }
  if (command == "start") return cmd_start(args);
  if (command == "status") return cmd_status(args);
  if (command == "group") return cmd_group(args);
  if (command == "stop") return cmd_stop(args);
  if (command == "run") return tune::cli::cmd_run(args);
  if (command == "resume") return cmd_resume(args);
  if (command == "rebalance") return cmd_rebalance(args);
  if (command == "drain") return cmd_drain(args);
  if (command == "dashboard") return cmd_dashboard(args);
  if (command == "user") return cmd_user(args);
  if (command == "tls") return cmd_tls(args);
  std::cerr << "tune: unknown command '" << command << "'\n\n" << usage;
  return 2;
}
