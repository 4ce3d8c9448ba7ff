// The public API (tune/tune.hpp) over the actors: the embedded cluster, the
// connection to a head, the trainables' worker mode and the tuner.
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/tune.hpp"
#include "tune/trial/process.hpp"
#include "tune/trial/reuse.hpp"

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <future>
#include <iostream>
#include <map>
#include <set>
#include <mutex>
#include <random>

#include "tune/cluster/address.hpp"
#include "tune/net/tls.hpp"
#include "client/client.hpp"
#include "controller/controller.hpp"
#include "dashboard/dashboard.hpp"
#include "transport/dial.hpp"
#include "head/head.hpp"
#include "log.hpp"
#include "node/node.hpp"
#include "services/services.hpp"
#include "tune/cluster/token.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/host/detect.hpp"
#include "tune/host/local_heads.hpp"
#include "tune/host/nvml.hpp"
#include "tune/trial/error_headline.hpp"
#include "tune/tuner/driver_link.hpp"
#include "tune/tuner/trackers.hpp"
#include "tune/trial/output_metrics.hpp"
#include "tune/trial/workdir.hpp"
#include "tune/tuner/progress.hpp"

namespace tune {

// --- trainables -------------------------------------------------------------------

namespace {

struct trainable_registry {
  std::map<std::string, trainable_fn> fns;
  std::vector<std::string> duplicates;
};

trainable_registry& registry() {
  static trainable_registry r;
  return r;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// A trial's worker: runs the trainable with the trial's context; never returns. Started
// with TUNE_REUSE_DIR (tune/trial/reuse.hpp), a trial that ended well leaves it waiting
// for the experiment's next trial on the same cards, which it then runs in this process.
[[noreturn]] void run_worker(const std::string& name) {
  auto& r = registry();
  auto it = r.fns.find(name);
  if (it == r.fns.end()) {
    std::cerr << "libtune worker: this program has no trainable '" << name << "' (it has: " << joined(trainable_names())
              << "); was it built from the same source as the program that started the experiment?\n";
    std::exit(2);
  }
  bool handed = false;  // this process took its trial from an earlier one's
  for (;;) {
    auto ctx = trial_context::from_environment();
    if (!ctx) {
      std::cerr << "libtune worker: " << ctx.error().message() << "\n";
      std::exit(2);
    }
    if (handed && !ctx->say(reuse::adopted_line)) std::exit(2);
    try {
      it->second(*ctx);
    } catch (const std::exception& e) {
      std::cerr << "trainable " << name << " failed: " << e.what() << "\n";
      std::exit(1);
    } catch (...) {
      std::cerr << "trainable " << name << " failed with an exception that is not a std::exception\n";
      std::exit(1);
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    const char* dir = std::getenv("TUNE_REUSE_DIR");
    if (!dir || !*dir || !ctx->say(reuse::idle_line)) std::exit(0);
    const char* wait_text = std::getenv("TUNE_REUSE_WAIT_MS");
    auto wait = std::chrono::milliseconds(wait_text ? std::max(0L, std::atol(wait_text)) : 2000L);
    auto next = reuse::wait_for_next(dir, wait);
    if (!next) {
      std::cerr << "libtune worker: " << next.error().message() << "\n";
      std::exit(2);
    }
    if (!*next) std::exit(0);  // nobody came: done
    if (auto s = reuse::apply(**next); !s) {
      std::cerr << "libtune worker: " << s.message() << "\n";
      std::exit(2);
    }
    trial_context::forget_stop();
    ::setenv("TUNE_WORKER_REUSED", "1", 1);  // what the trainable may want to know
    handed = true;
  }
}

}  // namespace

bool register_trainable(const std::string& name, trainable_fn fn) {
  auto& r = registry();
  if (!r.fns.emplace(name, std::move(fn)).second) r.duplicates.push_back(name);
  return true;
}

std::vector<std::string> trainable_names() {
  std::vector<std::string> out;
  for (auto& [name, fn] : registry().fns) out.push_back(name);
  return out;
}

// --- the cluster ------------------------------------------------------------------

struct cluster::impl {
  std::shared_ptr<spawner> workers;  // the embedded node's (ends after the actor system)
  std::shared_ptr<containment> contain;  // its trials' cgroups (ends after the actor system)
  std::unique_ptr<mps_daemon> mps;  // its trials' CUDA MPS, with cluster_options::mps (ends after the actor system)
  std::unique_ptr<wire::config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<cluster_client> client;
  caf::actor head, node;  // embedded only
  std::string address;    // empty: embedded
  std::string found;      // how a cluster without --address was found ("" : given)
  std::string work_dir;
  bool own_work_dir = false;
  bool owns_log = false;  // the process's log lines go to this cluster's file
  std::string node_summary;
  std::mutex client_mutex;  // one caller of the client at a time
  std::unique_ptr<dashboard_server> dashboard;  // embedded, with --dashboard-port
  std::string dashboard_url;

  ~impl() {
    dashboard.reset();  // no more requests to the head
    client.reset();  // its program server ends
    if (node) caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    if (head) caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
    node = nullptr;
    head = nullptr;
    sys.reset();  // waits for every actor (the node ends its trials first)
    if (owns_log) (void)set_log_file("");  // after the last line of the embedded head and node
    if (own_work_dir) {
      std::error_code ec;
      std::filesystem::remove_all(work_dir, ec);
    }
  }
};

namespace {

std::string random_hex(int bytes) {
  std::random_device rd;
  std::string out;
  char buf[3];
  for (int i = 0; i < bytes; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", rd() & 0xff);
    out += buf;
  }
  return out;
}

// The embedded cluster's work folder and log file (cluster.log): the head's and node's
// log lines (trials started, ended, ...) go there, not over the program's output.
status open_work_dir(cluster::impl& st, const cluster_options& opt) {
  st.work_dir = opt.work_dir;
  if (st.work_dir.empty()) {
    auto base = std::filesystem::temp_directory_path() / ("libtune-embedded-" + std::to_string(::getpid()) + "-" + random_hex(3));
    st.work_dir = base.string();
    st.own_work_dir = !opt.keep_work_dir;
  }
  std::error_code ec;
  std::filesystem::create_directories(st.work_dir, ec);
  if (ec) return status{errc::invalid_argument, "cannot create the work folder " + st.work_dir + ": " + ec.message()};
  if (auto s = set_log_file(st.work_dir + "/cluster.log"); !s) return s;
  st.owns_log = true;
  return status::ok();
}

// The head, with its dashboard on 127.0.0.1 when asked (actors/services/services.hpp). On this
// machine only: the embedded cluster's token is made up here, for this run.
status start_embedded_head(cluster::impl& st, const cluster_options& opt, const std::string& token) {
  head_options hopt{token, "embedded", wire::heartbeat_timeout, {}};
  std::optional<dashboard_options> dopt;
  if (opt.dashboard_port)  // its socket's folder in the cluster's: one folder left, not two, if the process is killed
    dopt = dashboard_options{"127.0.0.1", *opt.dashboard_port, false, {}, std::filesystem::absolute(st.work_dir).string()};
  auto service = start_head_service(*st.sys, hopt, dopt, "127.0.0.1");
  if (!service) return service.error();
  st.head = service->head;
  st.dashboard = std::move(service->dashboard);
  if (st.dashboard) st.dashboard_url = service->dashboard_url + "?token=" + token;
  return status::ok();
}

// The node, joined to the head in this process without a connection.
struct embedded_node {
  const host_info& host;
  const node_resources& resources;
  std::string id, token;
};

expected<node_options> embedded_node_options(const cluster_options& opt, const cluster::impl& st, const node_host& parts,
                                             const embedded_node& n) {
  node_options no;
  no.head_host = "embedded";
  no.token = n.token;
  no.node_id = n.id;
  no.hostname = n.host.hostname;
  no.address = "127.0.0.1";
  no.resources = n.resources;
  no.work_dir = st.work_dir;
  fill_node_options(no, parts, opt.gpu_audit_ms, opt.trial_max_pids);
  if (opt.foreign_threshold < 0 || opt.foreign_margin < 0)
    return status{errc::invalid_argument, "foreign_threshold and foreign_margin are sizes: give 0 or more bytes"};
  no.others = {opt.foreign_threshold, opt.foreign_margin};
  if (auto s = check_trial_folder(no); !s) return status{s.code(), "the embedded cluster: " + s.message()};
  no.head_actor = st.head;
  return no;
}

// MPS when asked, the node, and the wait for its join (actors/services/services.hpp).
status join_embedded_node(cluster::impl& st, const cluster_options& opt, node_options no) {
  auto started = start_node_service(*st.sys, std::move(no), {.mps = opt.mps, .names = api_option_names()});
  if (started.at == node_start::step::no_answer)
    return status{errc::insufficient,
                  "the embedded node did not join its head in " + std::to_string(node_join_timeout.count()) + " s"};
  if (started.at == node_start::step::refused)
    return status{started.why.code(), "the embedded node: " + started.why.message()};
  if (!started) return started.why;
  st.node = started.node;
  st.mps = std::move(started.mps);
  return status::ok();
}

std::string node_summary(const node_resources& res) {
  auto& gpus = res.gpus();
  bool real = std::any_of(gpus.begin(), gpus.end(), [](auto& g) { return !g.logical; });
  return std::string{"1 node: "} + res.total().cpu().to_string() + " CPUs, " +
         (gpus.empty() ? std::string{"no GPU"}
                       : std::to_string(gpus.size()) +
                             (real ? " GPUs" : gpus.front().simulated ? " simulated GPUs" : " logical GPUs"));
}

expected<std::shared_ptr<cluster::impl>> start_embedded(const cluster_options& opt) {
  auto st = std::make_shared<cluster::impl>();
  auto host = detect_host();
  if (!host.gpu.error.empty()) return status{errc::invalid_argument, host.gpu.error};
  std::string id = "embedded-" + random_hex(4);
  node_resource_request request{opt.num_cpus, opt.num_gpus};
  auto res = node_resources_for(request, host, id, api_option_names());  // actors/services/services.hpp
  if (!res) return res.error();
  if (auto s = check_gpu_audit_ms(opt.gpu_audit_ms, "gpu_audit_ms"); !s) return s;
  if (auto s = check_trial_max_pids(opt.trial_max_pids, "trial_max_pids"); !s) return s;
  if (auto s = open_work_dir(*st, opt); !s) return s;
  // The spawner and the trials' containment, before the actor system's threads
  // (actors/services/services.hpp).
  auto host_parts = open_node_host({id, opt.containment, {}, opt.trial_user, true});
  if (!host_parts) return host_parts.error();
  st->workers = host_parts->workers;
  st->contain = host_parts->contain;
  st->cfg = std::make_unique<wire::config>(false);
  st->sys = std::make_unique<caf::actor_system>(*st->cfg);
  auto token = random_hex(16);
  if (auto s = start_embedded_head(*st, opt, token); !s) return s;
  auto no = embedded_node_options(opt, *st, *host_parts, {host, *res, id, token});
  if (!no) return no.error();
  if (auto s = join_embedded_node(*st, opt, std::move(no).value()); !s) return s;
  st->client = std::make_unique<cluster_client>(*st->sys, st->head, token);
  st->node_summary = node_summary(*res);
  return st;
}

expected<std::shared_ptr<cluster::impl>> connect_to(const cluster_options& opt) {
  auto where = parse_host_port(opt.address, "--address");
  if (!where) return where.error();
  auto token = read_token(opt.token_file.empty() ? default_token_file() : opt.token_file);
  if (!token) return token.error();
  if (auto files = tls::from_environment({opt.tls_cert, opt.tls_key, opt.tls_ca}); files.any()) {
    auto ctx = tls::context::make(files, false);
    if (!ctx) return ctx.error();
    set_client_tls(*ctx);  // this process dials heads over TLS from here on
  }
  auto st = std::make_shared<cluster::impl>();
  st->cfg = std::make_unique<wire::config>(true);
  st->sys = std::make_unique<caf::actor_system>(*st->cfg);
  auto c = cluster_client::connect(*st->sys, where->host, where->port, token->token);
  if (!c) return c.error();
  st->client = std::move(c).value();
  st->address = where->to_string();
  if (auto s = st->client->status_json(); !s) return s.error();  // the token is checked here
  return st;
}

// Without an address: the cluster that runs on this machine ($TUNE_ADDRESS, else the
// head `tune start --head` announced here), as ray.init() finds one; nothing when none
// runs (an embedded cluster then), or with `local`. Several heads here: which one is
// the user's to say.
expected<std::optional<local_head>> cluster_here(const cluster_options& opt) {
  if (!opt.address.empty() || opt.local) return std::optional<local_head>{};
  if (const char* a = std::getenv("TUNE_ADDRESS"); a && *a) {
    local_head named;
    named.address = a;
    return std::optional<local_head>{named};
  }
  auto heads = local_heads();
  if (heads.empty()) return std::optional<local_head>{};
  if (heads.size() > 1) {
    std::string list;
    for (auto& h : heads)
      list += (list.empty() ? "" : ", ") + h.address + " (pid " + std::to_string(h.pid) + ", started by " + h.user + ")";
    return status{errc::invalid_argument, std::to_string(heads.size()) + " clusters run on this machine: " + list +
                                              ". Say which with --address HOST:PORT, or run on a cluster of your own with --local"};
  }
  return std::optional<local_head>{heads.front()};
}

// Why a cluster found here could not be joined, and what to do.
status cannot_join(const local_head& h, const cluster_options& opt, const status& why) {
  std::string which = h.pid > 0 ? "a cluster runs on this machine (head " + h.address + ", pid " + std::to_string(h.pid) +
                                      ", started by " + h.user + ")"
                                : "TUNE_ADDRESS names the cluster at " + h.address;
  auto token = opt.token_file.empty() ? default_token_file() : opt.token_file;
  std::string todo = h.tls ? " It uses TLS: give this process the cluster's certificates (--tls-cert, --tls-key, --tls-ca or "
                             "$TUNE_TLS_CERT, $TUNE_TLS_KEY, $TUNE_TLS_CA)."
                           : " Ask its admin for a token of your own (`tune user add NAME` makes one) and save it as " +
                                 token + " (or pass --token-file F).";
  return status{why.code(), which + ", and without --address it is joined, as ray.init() does; but " + why.message() +
                                "." + todo + " Or run on an embedded cluster of your own with --local."};
}

// A trial's worker is this program started with --tune-worker NAME (or --tune-spawner):
// tune::init, or run_if_trial_worker, runs the trainable before main goes on. A main that
// did not call either first gets here in every trial, and would start a cluster there.
status not_a_worker() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; argv.size() < 3 && std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.size() < 2 || (argv[1] != "--tune-worker" && argv[1] != "--tune-spawner")) return {};
  return status{errc::invalid_argument,
                "this program was started as a trial's worker (" + argv[1] + (argv.size() > 2 ? " " + argv[2] : "") +
                    ") but its main went on to start a cluster: call tune::init(argc, argv) first thing in main (or "
                    "tune::run_if_trial_worker(argc, argv) before cluster::start), so that a trial runs its trainable "
                    "(docs/api.md, \"How trials run\")"};
}

}  // namespace

expected<cluster> cluster::start(cluster_options opt) {
  if (auto worker = not_a_worker(); !worker) return worker;
  auto here = cluster_here(opt);
  if (!here) return here.error();
  std::string found;
  if (*here) {
    opt.address = (*here)->address;
    found = (*here)->pid > 0 ? "found running on this machine: head pid " + std::to_string((*here)->pid) + ", started by " +
                                   (*here)->user
                             : "named by TUNE_ADDRESS";
  }
  auto st = opt.address.empty() ? start_embedded(opt) : connect_to(opt);
  if (!st && *here) return cannot_join(**here, opt, st.error());
  if (!st) return st.error();
  (*st)->found = found;
  cluster c;
  c.impl_ = *st;
  if (!c.impl_->dashboard_url.empty())
    std::cerr << "tune: the embedded cluster's dashboard: " << c.impl_->dashboard_url << " (signs in)\n";
  return c;
}

bool cluster::embedded() const { return impl_ && impl_->address.empty(); }

std::string cluster::description() const {
  if (!impl_) return "no cluster";
  if (!embedded())
    return "the cluster at " + impl_->address +
           (impl_->found.empty() ? "" : " (" + impl_->found + "; --local runs an embedded cluster instead)");
  return "an embedded cluster (" + impl_->node_summary + (impl_->own_work_dir ? "" : "; log: " + impl_->work_dir + "/cluster.log") + ")";
}

std::string cluster::dashboard_url() const { return impl_ ? impl_->dashboard_url : ""; }

expected<std::string> cluster::status_json() const {
  if (!impl_) return status{errc::invalid_argument, "no cluster (use tune::init or cluster::start)"};
  std::lock_guard lock{impl_->client_mutex};
  return impl_->client->status_json();
}

expected<cluster_capacity> cluster::capacity() const {
  auto text = status_json();
  if (!text) return text.error();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("nodes")) return status{errc::inconsistent, "the head's status is not readable"};
  cluster_capacity c;
  for (auto& n : j["nodes"]) {
    if (!n.value("alive", false)) continue;
    ++c.nodes;
    auto& total = n["resources"]["total"];
    c.cpus += total.value("cpu", 0.0);
    c.gpus += total.value("gpu", 0.0);
    for (auto& g : n.value("gpus", nlohmann::json::array())) c.real_gpus = c.real_gpus || !g.value("logical", false);
  }
  return c;
}

// --- init ---------------------------------------------------------------------------

const char* init_help() {
  return "libtune options:\n"
         "  --address HOST:PORT  run the trials on the cluster whose head is there\n"
         "                       (default: the cluster running on this machine, if\n"
         "                       one does, as ray.init() finds one; else an embedded\n"
         "                       cluster in this process)\n"
         "  --local              an embedded cluster even when one runs on this machine\n"
         "  --token-file F       that cluster's token (default: ~/.tune/token)\n"
         "  --num-cpus N         the embedded cluster's CPUs (default: this machine's)\n"
         "  --num-gpus N         the embedded cluster's GPUs (default: this machine's;\n"
         "                       without cards: N logical GPUs, trials on the CPU)\n"
         "  --dashboard-port N   serve the embedded cluster's web dashboard on\n"
         "                       127.0.0.1:N (0: any free port; its address, which signs\n"
         "                       in, goes to standard error)\n";
}

void run_if_trial_worker(int argc, char** argv) {
  if (argc >= 3 && std::string{argv[1]} == "--tune-worker") run_worker(argv[2]);
  // A node's warm start of this program's trials (tune/trial/program_spawners.hpp): its
  // workers are forks of this process. Only single-threaded (a library that started
  // threads as it loaded cannot be forked safely): else it ends, and the node execs.
  if (argc >= 2 && std::string{argv[1]} == "--tune-spawner") {
    std::error_code ec;
    size_t threads = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      ++threads;
    if (threads != 1) std::_Exit(3);
    spawner::serve(3, [](int n, char** args) -> int {
      if (n >= 3) run_worker(args[2]);
      return 2;
    });
  }
}

expected<cluster> init(int& argc, char** argv) {
  run_if_trial_worker(argc, argv);
  if (!registry().duplicates.empty())
    return status{errc::invalid_argument, "trainable names used twice: " + joined(registry().duplicates) +
                                              " (each TUNE_TRAINABLE needs its own name)"};
  cluster_options opt;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--local") {
      opt.local = true;
      continue;
    }
    bool ours = arg == "--address" || arg == "--token-file" || arg == "--num-cpus" || arg == "--num-gpus" ||
                arg == "--dashboard-port";
    bool inline_value = false;
    for (auto name : {"--address=", "--token-file=", "--num-cpus=", "--num-gpus=", "--dashboard-port="})
      if (arg.rfind(name, 0) == 0) {
        value = arg.substr(std::string{name}.size());
        arg = arg.substr(0, std::string{name}.size() - 1);
        ours = inline_value = true;
      }
    if (!ours) {
      rest.push_back(argv[i]);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return status{errc::invalid_argument, arg + " needs a value"};
      value = argv[++i];
    }
    auto number = [&](double& out) -> status {
      char* end = nullptr;
      out = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || !std::isfinite(out))
        return status{errc::invalid_argument, arg + " " + value + ": not a number"};
      return status::ok();
    };
    if (arg == "--address") {
      opt.address = value;
    } else if (arg == "--token-file") {
      opt.token_file = value;
    } else {
      double n = 0;
      if (auto s = number(n); !s) return s;
      if (arg == "--num-cpus") {
        opt.num_cpus = n;
      } else if (arg == "--dashboard-port") {
        if (n != std::floor(n) || n < 0 || n > 65535)
          return status{errc::invalid_argument, "--dashboard-port " + value + ": give a port, 0 to 65535"};
        opt.dashboard_port = static_cast<int>(n);
      } else {
        if (n != std::floor(n)) return status{errc::invalid_argument, "--num-gpus " + value + ": give a whole number"};
        opt.num_gpus = static_cast<int>(n);
      }
    }
  }
  if (!opt.address.empty() && (opt.num_cpus || opt.num_gpus))
    return status{errc::invalid_argument,
                  "--num-cpus and --num-gpus are for the embedded cluster; a cluster at --address has its own nodes"};
  if (!opt.address.empty() && opt.dashboard_port)
    return status{errc::invalid_argument,
                  "--dashboard-port is for the embedded cluster; the head at --address serves its own (tune dashboard)"};
  if (!opt.address.empty() && opt.local) return status{errc::invalid_argument, "give --address or --local, not both"};
  // The embedded cluster's own settings ask for one.
  if (opt.num_cpus || opt.num_gpus || opt.dashboard_port) opt.local = true;
  for (size_t i = 0; i < rest.size(); ++i) argv[i] = rest[i];
  argc = static_cast<int>(rest.size());
  argv[argc] = nullptr;
  return cluster::start(opt);
}

// --- results -----------------------------------------------------------------------

expected<result_grid> result_grid::open(const std::string& dir, std::string metric, tune::mode mode) {
  auto s = experiment_store::open(dir);
  if (!s) return s.error();
  result_grid g;
  g.store_ = std::shared_ptr<experiment_store>(std::move(s).value());
  g.metric_ = std::move(metric);
  g.mode_ = mode;
  auto n = g.store_->result_count();
  g.results = n ? *n : 0;
  return g;
}

expected<result_grid> result_grid::open(const std::string& dir, std::vector<objective> objectives,
                                        std::vector<std::string> constraints) {
  if (objectives.empty()) return status{errc::invalid_argument, "result_grid: name at least one objective"};
  auto g = open(dir, objectives.front().name, objectives.front().direction);
  if (!g) return g;
  g->objectives_ = std::move(objectives);
  g->constraints_ = std::move(constraints);
  return g;
}

const std::string& result_grid::dir() const { return store_->dir(); }
expected<std::optional<best_trial>> result_grid::best(scope s) const {
  return find_best(*store_, metric_, mode_, s, constraints_);
}
expected<std::vector<front_trial>> result_grid::pareto_front() const {
  return find_pareto_front(*store_, objectives_.empty() ? std::vector<objective>{{metric_, mode_}} : objectives_,
                           constraints_);
}
expected<std::vector<trial_row>> result_grid::trials() const { return store_->trials(); }
expected<std::vector<result_row>> result_grid::history(const std::string& trial) const {
  if (auto t = store_->trial(trial); !t) return t.error();
  return store_->results(trial);
}
expected<std::string> result_grid::csv() const { return results_csv(*store_); }
expected<nlohmann::json> result_grid::json() const { return experiment_json(*store_); }
int result_grid::errors() const {
  auto t = store_->trials();
  if (!t) return 0;
  int n = 0;
  for (auto& row : *t) n += row.state == trial_state::error;
  return n;
}

// --- the tuner ---------------------------------------------------------------------

namespace {

// How many trials fit at once: per node, the fewest of any resource the bundle asks.
std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The default experiment folder, made here: BASE, or BASE-2, BASE-3, ... when programs
// started in the same second took it (mkdir is the arbiter between processes).
expected<std::string> fresh_experiment_dir(const std::string& base) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(base).parent_path(), ec);
  if (ec) return status{errc::invalid_argument, "cannot make " + std::filesystem::path(base).parent_path().string() + ": " + ec.message()};
  for (int n = 1; n < 1000; ++n) {
    std::string dir = n == 1 ? base : base + "-" + std::to_string(n);
    if (::mkdir(dir.c_str(), 0755) == 0) return dir;
    if (errno != EEXIST) return status{errc::invalid_argument, "cannot make the experiment directory " + dir + ": " + std::strerror(errno)};
  }
  return status{errc::already_exists, base + " and its next 998 names are taken: give tune_config::experiment_dir"};
}

// The progress display: the table redrawn in place on a terminal, else the changes
// as plain lines. On stderr, so that a program's own output stays clean.
// The progress on standard error (a table redrawn in place on a terminal, or lines), and
// the lines beside it (trials' output, results): those go above the table, which is
// drawn again below them.
struct progress_printer {
  progress_style style;
  progress_snapshot last;
  int drawn_lines = 0;
  std::string table;  // the table last drawn
  void operator()(const progress_snapshot& s) {
    if (style == progress_style::table) {
      int width = 100;  // the terminal's width, else $COLUMNS, else 100
      winsize ws{};
      if (::ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = std::max(40, static_cast<int>(ws.ws_col));
      else if (const char* c = std::getenv("COLUMNS")) width = std::max(40, std::atoi(c));
      auto text = render_progress(s, width, 20);
      std::cerr << shown_utf8(erase() + text) << std::flush;  // configs and errors hold outside text
      table = text;
      drawn_lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    } else if (style == progress_style::lines) {
      for (auto& line : progress_changes(last, s)) std::cerr << shown_utf8(line) << "\n";
      std::cerr << std::flush;
    }
    last = s;
  }
  void line(const std::string& text) {
    std::string out = erase() + text + "\n";
    if (style == progress_style::table) out += table;
    std::cerr << shown_utf8(out) << std::flush;
  }

 private:
  std::string erase() const { return drawn_lines > 0 ? "\x1b[" + std::to_string(drawn_lines) + "F\x1b[J" : ""; }
};

// The progress display's style: automatic is the table on a terminal, else lines.
progress_style progress_shown(progress_style style) {
  if (style != progress_style::automatic) return style;
  return ::isatty(2) ? progress_style::table : progress_style::lines;
}

// The end of an experiment whose trials failed: each kind of error once, with how many
// trials had it and where the first one's standard error is (error_summary).
void print_errors(const experiment_store& store) {
  auto trials = store.trials();
  if (!trials) return;
  std::vector<errored_trial> failed;
  for (auto& t : *trials) {
    if (t.state != trial_state::error) continue;
    std::error_code ec;
    auto where = store.stderr_path(t.id);
    failed.push_back({t.id, t.error, std::filesystem::exists(where, ec) ? where : ""});
  }
  for (auto& line : error_summary(failed)) std::cerr << "tune: " << line << "\n";
}

std::string joined_command(const std::vector<std::string>& argv) {
  std::string out;
  for (auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// A program trial's parts, checked before anything is written (a bad one leaves no
// experiment folder behind), then its working directory served to the nodes.
struct checked_program {
  std::vector<std::string> env;            // NAME=VALUE
  std::optional<scanned_workdir> workdir;  // none when nothing is shipped
  std::string in_place;                    // the folder trials run in themselves (program::in_place)
  nlohmann::json meta;                     // what the store records of it
};

// The command, its placeholders against a configuration of the space, and the
// environment (forwarded values taken from this process), into out.env; `env` gets
// every name and value.
status check_command_and_env(const program& p, const search_space& space, const tune_config& c, checked_program& out,
                             std::map<std::string, std::string>& env) {
  if (p.command.empty() || p.command[0].empty())
    return status{errc::invalid_argument, "the program's command is empty: give its argv, e.g. {\"python3\", \"train.py\"}"};
  if (auto names = command_placeholders(p.command); !names) return status{errc::invalid_argument, "the command: " + names.error().message()};
  rng r{c.seed};
  if (auto sample = space.sample(r); sample) {
    if (auto argv = render_command(p.command, *sample, p.args); !argv)
      return status{errc::invalid_argument, argv.error().message() + " (placeholders name the search space's parameters)"};
  }
  env = p.env;
  for (auto& name : p.forward_env) {
    const char* v = std::getenv(name.c_str());
    if (!v)
      return status{errc::invalid_argument, "env " + name + " is to be forwarded from this process, but it is not set here "
                                            "(set it, or give its value)"};
    env[name] = v;
  }
  for (auto& [k, v] : env) {
    if (auto s = check_env_name(k); !s) return status{errc::invalid_argument, "env: " + s.message()};
    out.env.push_back(k + "=" + v);
  }
  if (!p.metric_patterns.empty())
    if (auto m = output_metrics::make(p.metric_patterns, c.metric); !m) return m.error();
  return status::ok();
}

// Where the trials run: the working directory itself (in_place), a scanned copy of it
// to ship (never the experiment folder `dir` inside it), or nothing. The folder's root
// ("" : none).
expected<std::string> check_working_dir(const program& p, const std::string& dir, checked_program& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (p.in_place) {
    if (p.working_dir.empty())
      return status{errc::invalid_argument, "in_place runs each trial in the working directory itself: give one (working_dir)"};
    auto canonical = fs::canonical(p.working_dir, ec);
    if (ec || !fs::is_directory(canonical))
      return status{errc::invalid_argument, "the working directory " + p.working_dir + " is not a folder" +
                                                (ec ? " (" + ec.message() + ")" : std::string{})};
    out.in_place = canonical.string();
    out.meta["working_dir"] = out.in_place;
    out.meta["in_place"] = true;
    return out.in_place;
  }
  if (p.working_dir.empty()) return std::string{};
  auto abs_dir = fs::absolute(dir, ec).lexically_normal().string();
  auto scanned = scan_workdir(p.working_dir, {.max_bytes = p.working_dir_limit, .max_files = 20000, .exclude = {abs_dir}});
  if (!scanned) return scanned.error();
  out.meta["working_dir"] = scanned->root;
  out.meta["files"] = scanned->manifest.files.size();
  out.meta["bytes"] = scanned->manifest.bytes();
  if (!scanned->skipped.empty()) {
    std::cerr << "tune: not shipped (not files or folders): ";
    for (size_t i = 0; i < scanned->skipped.size() && i < 5; ++i) std::cerr << (i ? ", " : "") << shown_utf8(scanned->skipped[i]);
    std::cerr << "\n";
  }
  auto root = scanned->root;
  out.workdir = std::move(*scanned);
  return root;
}

// The command's program: a relative path must be in the working directory `root`; on an
// embedded cluster (this machine is the node) any other must be found here too.
status check_program_file(bool embedded, const std::string& prog, const std::string& root,
                          std::map<std::string, std::string>& env) {
  namespace fs = std::filesystem;
  bool relative_path = prog.find('/') != std::string::npos && !fs::path(prog).is_absolute();
  if (relative_path && root.empty())
    return status{errc::invalid_argument, "the command's program " + prog + " is a relative path, but no working directory "
                                          "is shipped: give the working directory it is in, or an absolute path"};
  if (relative_path || embedded) {
    std::error_code ec;
    auto path = env.count("PATH") ? env["PATH"] : inherited_trial_env()["PATH"];
    if (auto found = resolve_program(prog, root.empty() ? fs::current_path(ec).string() : root, path); !found)
      return found.error();
  }
  return status::ok();
}

expected<checked_program> check_program(bool embedded, const program& p, const search_space& space, const tune_config& c,
                                        const std::string& dir) {
  checked_program out;
  std::map<std::string, std::string> env;
  if (auto s = check_command_and_env(p, space, c, out, env); !s) return s;
  auto root = check_working_dir(p, dir, out);
  if (!root) return root.error();
  if (auto s = check_program_file(embedded, p.command[0], *root, env); !s) return s;
  out.meta["command"] = p.command;
  out.meta["args"] = p.args == config_args::append ? "append" : "none";
  nlohmann::json names = nlohmann::json::array();
  for (auto& [k, v] : env) names.push_back(k);  // the names only: values may be secrets
  out.meta["env"] = names;
  out.meta["metric_patterns"] = p.metric_patterns;
  return out;
}

// In-place trials run in a folder of this machine: every node of the cluster must be here.
status all_nodes_here(const cluster& c) {
  auto text = c.status_json();
  if (!text) return text.error();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  std::string elsewhere;
  auto me = hostname();
  if (j.is_object())
    for (auto& n : j.value("nodes", nlohmann::json::array()))
      if (n.value("alive", false) && n.value("host", me) != me)
        elsewhere += (elsewhere.empty() ? "" : ", ") + n.value("id", std::string{"?"}) + " on " + n.value("host", std::string{"?"});
  if (elsewhere.empty()) return status::ok();
  return status{errc::invalid_argument, "in_place runs trials in this machine's folder itself, but " + c.description() +
                                            " has nodes on other machines (" + elsewhere +
                                            "): ship a copy instead (leave in_place / --in-place out)"};
}

// Serves the working directory's files and its manifest (written to the experiment
// folder as workdir.json) to the nodes; the manifest's reference (none: nothing shipped).
expected<program_ref> serve_workdir(cluster::impl& st, checked_program& p, const std::string& dir) {
  if (!p.workdir) {  // nothing to ship; the server still serves checkpoint copies to restarts
    std::lock_guard lock{st.client_mutex};
    if (auto s = st.client->serve_files({}, {}, {}); !s) return status{s.code(), "starting the program server: " + s.message()};
    return program_ref{};
  }
  auto& w = *p.workdir;
  std::vector<std::string> shas;
  std::vector<uint64_t> sizes;
  for (auto& f : w.manifest.files) {
    shas.push_back(f.sha256);
    sizes.push_back(f.size);
  }
  auto manifest_path = dir + "/workdir.json";
  {
    std::ofstream m(manifest_path, std::ios::trunc);
    m << w.manifest.to_json() << "\n";
    if (!m) return status{errc::invalid_argument, "cannot write " + manifest_path};
  }
  std::lock_guard lock{st.client_mutex};
  if (auto s = st.client->serve_files(w.sources, shas, sizes); !s) return status{s.code(), "serving the working directory: " + s.message()};
  auto served = st.client->serve_program(manifest_path);
  if (!served) return status{served.error().code(), "serving the working directory: " + served.error().message()};
  p.meta["manifest"] = served->sha256;
  return *served;
}

// What fit() makes, step by step, for run_experiment.
struct fit_run {
  experiment_plan plan;
  std::unique_ptr<search_algorithm> search;
  std::unique_ptr<trial_scheduler> scheduler;
  std::string resume_dir;                     // "" : a new experiment
  std::unique_ptr<experiment_store> resumed;  // its store, when resuming
  int concurrent = 0;                         // trials at once
  int asked_concurrent = 0;                   // the user's cap (0: none), kept when auto-packing sizes the share
  int64_t card_memory = 0;                    // the cluster's smallest card (auto-packing)
  std::unique_ptr<experiment_engine> engine;
  std::string dir;                            // the experiment folder
  std::optional<resume_plan> replay;          // resuming: what the store held
  std::optional<checked_program> checked;     // a program trial, checked before anything is written
  std::unique_ptr<experiment_store> store;
  std::string self_path;                      // this program's file (the trainable's worker)
  // The user's code in the decisions (tune/tuner/hooks.hpp): a C++ program's hooks, or the
  // Python driver's; what they answer; the host, once the folder is known.
  std::optional<local_hooks_setup> local;
  hook::interest hooks_want;
  std::shared_ptr<hook_host> hooks;
};

status make_search_and_scheduler(fit_run& r, const search_space& space) {
  auto search = make_search(r.plan, space);
  if (!search) return search.error();
  r.search = std::move(search).value();
  auto scheduler = make_scheduler(scheduler_of(r.plan), r.plan.config.metric, r.plan.config.mode);
  if (!scheduler) return scheduler.error();
  r.scheduler = std::move(scheduler).value();
  return status::ok();
}

// Resuming (resume, or $TUNE_RESUME_DIR): the experiment's own settings must be this
// program's; its cap on trials at once is kept.
status open_resumed(fit_run& r, const std::string& trainable) {
  const auto& c = r.plan.config;
  r.resume_dir = c.resume ? c.experiment_dir : "";
  if (const char* env = std::getenv("TUNE_RESUME_DIR"); env && *env) {
    r.resume_dir = env;
    ::unsetenv("TUNE_RESUME_DIR");  // the program's first experiment is the one resumed
  }
  if (c.resume && r.resume_dir.empty()) return status{errc::invalid_argument, "resume: say which experiment (experiment_dir)"};
  r.concurrent = c.max_concurrent_trials;
  if (r.resume_dir.empty()) return status::ok();
  if (!std::filesystem::exists(r.resume_dir + "/experiment.db"))
    return status{errc::not_found, "no experiment to resume in " + r.resume_dir + " (it has no experiment.db)"};
  auto opened = experiment_store::open(r.resume_dir);
  if (!opened) return opened.error();
  r.resumed = std::move(opened).value();
  nlohmann::json now{{"trainable", trainable}, {"metric", c.metric}, {"mode", c.mode == mode::max ? "max" : "min"},
                     {"num_samples", c.num_samples}, {"search", r.search->name()}, {"scheduler", r.scheduler->name()},
                     {"seed", c.seed}};
  for (auto& [k, v] : now.items()) {
    auto was = r.resumed->meta(k);
    if (!was) return was.error();
    if (*was != v)
      return status{errc::inconsistent, "cannot resume " + r.resume_dir + ": its " + k + " is " + json_text(*was) +
                                            ", this program's is " + json_text(v) + " (resume it with the program and settings that started it)"};
  }
  if (auto m = r.resumed->meta("max_concurrent_trials"); m && m->is_number_integer()) r.concurrent = m->get<int>();
  return status::ok();
}

// What the cluster holds now, when the plan leaves it to the cluster: how many trials
// fit at once (no cap given), the smallest card's memory (auto-packing).
status size_on_cluster(fit_run& r, const cluster& c) {
  r.asked_concurrent = r.concurrent;
  if (r.concurrent != 0 && !r.plan.gpu_auto) return status::ok();
  auto text = c.status_json();
  if (!text) return text.error();
  auto status_now = nlohmann::json::parse(*text);
  if (r.concurrent == 0) r.concurrent = std::max(1, trials_that_fit(status_now, r.plan.bundles));
  r.card_memory = smallest_card_memory(status_now);
  if (r.plan.gpu_auto && r.card_memory <= 0)
    return status{errc::insufficient, "resources_per_trial: gpu \"auto\" measures trials on GPUs, and no node of the "
                                      "cluster has one now (start a node with GPUs, or ask for cpu only)"};
  return status::ok();
}

// Where the plan's user code runs: its own C++ hooks (started once the folder is known,
// with a resumed experiment's searcher state), or the Python driver that ran tune run.
// A C++ searcher learns the experiment's metric, mode, space, num_samples and seed here,
// before anything runs (an error it gives is fit()'s).
status plan_hooks(fit_run& r, const search_space& space) {
  const auto& c = r.plan.config;
  if (c.driver.fd >= 0) {
    r.hooks_want = c.driver.serves;
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(c.driver.timeout_s * 1000));
    r.hooks = std::make_shared<driver_link>(c.driver.fd, c.driver.serves, timeout);
    return status::ok();
  }
  r.local = local_hooks_of(r.plan);
  if (!r.local) return status::ok();
  r.hooks_want = local_hooks::interest_of(*r.local);
  if (auto& s = r.local->search) {
    search_properties p{c.metric, c.mode, c.metrics, c.constraints, space, c.num_samples, c.seed};
    status st;
    try {
      st = s->set_search_properties(p);
    } catch (const std::exception& e) {
      st = status{errc::invalid_argument, std::string{"raised "} + e.what()};
    }
    if (!st) return status{st.code(), "the searcher '" + s->name() + "' (set_search_properties): " + st.message()};
  }
  return status::ok();
}

std::string hooks_state_file(const fit_run& r) { return r.dir + "/hooks_state"; }

void start_local_hooks(fit_run& r) {
  if (!r.local) return;
  if (r.replay) {  // a resumed experiment: its searcher's saved state
    std::ifstream in(hooks_state_file(r), std::ios::binary);
    r.local->saved_state.assign(std::istreambuf_iterator<char>(in), {});
  }
  r.hooks = std::make_shared<local_hooks>(std::move(*r.local));
  r.local.reset();
}

// The engine over the search and scheduler. Auto-packing: as many at once as hold the
// probe share until the share is decided; the controller then sets the cap to what the
// cluster holds at that share.
status make_engine(fit_run& r, const search_space& space) {
  const auto& c = r.plan.config;
  engine_options eo;
  eo.metric = c.metric;
  eo.direction = c.mode;
  for (std::size_t i = 1; i < c.metrics.size(); ++i) {
    eo.other_objectives.push_back(c.metrics[i].name);
    eo.other_directions.push_back(c.metrics[i].direction);
  }
  eo.constraints = c.constraints;
  eo.max_concurrent = r.concurrent;
  eo.max_failures = c.max_failures;
  eo.stop = c.stop;
  eo.time_budget_s = c.time_budget_s;
  eo.stoppers = c.stoppers;  // the engine decides libtune's own; a user's stopper is the hooks'
  eo.hooks_suggest = r.hooks_want.suggests;
  eo.hooks_prepare = r.hooks_want.prepares;
  eo.hooks_explore = r.hooks_want.explores && std::holds_alternative<pbt>(c.scheduler);
  if (eo.hooks_suggest) {
    eo.max_suggestions = c.num_samples;
    eo.accept_suggestion = suggestion_check(space);
  }
  auto engine = experiment_engine::make(*r.search, *r.scheduler, eo);
  if (!engine) return engine.error();
  r.engine = std::move(engine).value();
  return status::ok();
}

// The experiment folder (the resumed one, the config's, or a fresh one), and a resumed
// experiment's store replayed into the engine.
status choose_dir_and_replay(fit_run& r) {
  const auto& c = r.plan.config;
  r.dir = !r.resume_dir.empty() ? r.resume_dir : c.experiment_dir;
  if (r.dir.empty()) {
    auto fresh = fresh_experiment_dir("tune_results/" + c.name + "-" + utc_stamp());
    if (!fresh) return fresh.error();
    r.dir = *fresh;
  }
  if (!r.resumed) return status::ok();
  auto p = replay_experiment(*r.engine, *r.resumed);
  if (!p) return p.error();
  r.replay = std::move(*p);
  (void)r.resumed->add_event("", "resumed", {{"replayed_results", r.replay->replayed_results},
                                             {"finished_trials", r.replay->finished_trials},
                                             {"interrupted_trials", r.replay->interrupted_trials}});
  std::cerr << "resuming " << r.dir << ": " << r.replay->finished_trials << " trial(s) done, " << r.replay->interrupted_trials
            << " start again from their checkpoints, " << r.replay->replayed_results << " result(s) kept\n";
  return status::ok();
}

// A program trial, checked before anything is written (a bad one leaves no experiment
// folder behind).
status check_trials_program(fit_run& r, const cluster& c, const program& p, const search_space& space) {
  auto checked = check_program(c.embedded(), p, space, r.plan.config, r.dir);
  if (!checked) return checked.error();
  r.checked = std::move(*checked);
  if (!r.checked->in_place.empty() && !c.embedded())
    if (auto s = all_nodes_here(c); !s) return s;
  return status::ok();
}

// The store (the resumed one, or a new one that must be empty), and this program's file.
status open_store_and_self(fit_run& r) {
  auto store = r.resumed ? expected<std::unique_ptr<experiment_store>>{std::move(r.resumed)} : experiment_store::open(r.dir);
  if (!store) return store.error();
  r.store = std::move(store).value();
  if (auto t = r.store->trials(); !r.replay && (!t || !t->empty()))
    return status{errc::already_exists, "the experiment directory " + r.dir +
                                            " already holds an experiment; give a new one, or resume it (tune_config::resume, "
                                            "tune resume " + r.dir + ")"};
  std::error_code ec;
  auto self_path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return status{errc::not_found, "cannot find this program's file (/proc/self/exe): " + ec.message()};
  r.self_path = self_path.string();
  return status::ok();
}

// How to run this program again (`tune resume`): its file, argv and folder.
nlohmann::json this_command(const std::string& self_path) {
  nlohmann::json command{{"argv", nlohmann::json::array()}, {"exe", self_path}};
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  for (std::string arg; std::getline(in, arg, '\0');) command["argv"].push_back(arg);
  std::error_code ec;
  command["cwd"] = std::filesystem::current_path(ec).string();
  return command;
}

// A new experiment's settings in its store (a resumed one has them).
status record_settings(fit_run& r, const cluster& cl, const std::string& trainable) {
  if (r.replay) return status::ok();
  const auto& c = r.plan.config;
  nlohmann::json resources_json = nlohmann::json::array();
  for (auto& b : r.plan.bundles) resources_json.push_back(nlohmann::json::parse(b.to_json()));
  for (auto& [k, v] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"name", c.name}, {"metric", c.metric}, {"mode", c.mode == mode::max ? "max" : "min"},
           {"num_samples", c.num_samples}, {"max_concurrent_trials", r.plan.gpu_auto ? r.asked_concurrent : r.concurrent},
           {"bundles", resources_json},
           {"search", r.search->name()}, {"scheduler", r.scheduler->name()}, {"seed", c.seed},
           {"trainable", trainable}, {"cluster", cl.description()}, {"command", this_command(r.self_path)},
           {"dir", std::filesystem::absolute(r.dir).string()}})
    if (auto s = r.store->set_meta(k, v); !s) return s;
  if (!r.plan.gpu_auto) return status::ok();
  return r.store->set_meta("auto_packing", {{"margin", c.auto_packing.margin},
                                            {"probe_share", c.auto_packing.probe_share},
                                            {"probe_trials", c.auto_packing.probe_trials},
                                            {"probe_results", c.auto_packing.probe_results},
                                            {"min_share", c.auto_packing.min_share}});
}

// What the trials run: the program (its working directory served, recorded in the
// store) or this program's trainable (this program served to the nodes).
status what_trials_run(fit_run& r, cluster::impl& st, const std::optional<program>& prog, const std::string& trainable,
                       experiment_run_options& ro) {
  if (!r.checked) {
    ro.args = {"--tune-worker", trainable};
    std::lock_guard lock{st.client_mutex};  // the client's own calls, one at a time
    auto served = st.client->serve_program(r.self_path);
    if (!served) return status{served.error().code(), "serving this program to the nodes: " + served.error().message()};
    ro.program = *served;
    return status::ok();
  }
  auto manifest = serve_workdir(st, *r.checked, r.store->dir());
  if (!manifest) return manifest.error();
  if (auto s = r.store->set_meta("program", r.checked->meta); !s) return s;
  ro.command = prog->command;
  ro.command_args = prog->args;
  ro.workdir = *manifest;
  ro.workdir_path = r.checked->in_place;
  ro.env = r.checked->env;
  ro.output_patterns = prog->metric_patterns;
  return status::ok();
}

// The trackers' bridge (tune/tuner/trackers.hpp) for the plan's MLflow / W&B options. Its
// runs are keyed by the experiment folder, so a resumed experiment continues them.
std::shared_ptr<trial_sink> start_trackers(const fit_run& r) {
  const auto& c = r.plan.config;
  tracker_setup t;
  t.python = c.tracker_python;
  t.mlflow = c.mlflow;
  t.wandb = c.wandb;
  t.experiment = c.name;
  std::error_code ec;
  t.experiment_dir = std::filesystem::absolute(r.dir, ec).string();
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the folder: the same on a resume
  for (unsigned char ch : t.experiment_dir) h = (h ^ ch) * 1099511628211ull;
  char key[17];
  std::snprintf(key, sizeof key, "%08llx", static_cast<unsigned long long>(h >> 32));
  t.run_key = key;
  return tracker_sink::start(std::move(t));
}

// The controller's options from the plan: bundles, timeouts, moves, auto-packing, progress.
experiment_run_options run_options(const fit_run& r) {
  const auto& c = r.plan.config;
  experiment_run_options ro;
  ro.name = c.name;
  ro.bundles = r.plan.bundles;
  ro.strat = c.strategy;
  ro.world_size = r.plan.world_size;
  if (c.workers) ro.join_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.workers->join_timeout_s * 1000));
  ro.group_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.group_timeout_s * 1000));
  ro.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(c.stop_grace_s * 1000));
  ro.auto_rebalance = c.auto_rebalance;
  ro.standby_copies = c.standby_copies;
  ro.reuse_workers = c.reuse_workers;  // a program that does not speak the protocol just exits
  ro.trial_files = c.trial_files;
  if (!c.mlflow.is_null() || !c.wandb.is_null()) ro.sinks.push_back(start_trackers(r));
  ro.hooks = r.hooks;
  ro.hooks_state_file = hooks_state_file(r);
  ro.checkpoints = c.checkpoints;
  ro.log_to_driver = c.log_to_driver;
  ro.show_results = c.show_results;
  if (r.plan.gpu_auto) {
    ro.auto_packing = c.auto_packing;
    ro.card_memory = r.card_memory;
    ro.max_concurrent = r.asked_concurrent;
  }
  ro.min_move_interval = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, c.min_move_interval_s) * 1000));
  auto style = progress_shown(c.progress);
  auto printer = std::make_shared<progress_printer>(progress_printer{style, {}, 0, {}});
  if (style != progress_style::none) ro.on_progress = [printer](const progress_snapshot& s) { (*printer)(s); };
  ro.on_output = [printer](const std::string& line) { printer->line(line); };
  return ro;
}

// Runs the experiment (the controller talks to the head itself: the client stays free
// for other calls, status and capacity, meanwhile) and opens its results.
expected<result_grid> run_and_open_results(fit_run& r, cluster::impl& st, const experiment_run_options& ro) {
  const auto& c = r.plan.config;
  auto sum = run_experiment(*st.client, *r.engine, *r.store, ro, r.replay ? &*r.replay : nullptr);
  if (!sum) return sum.error();
  if (progress_shown(c.progress) != progress_style::none) print_errors(*r.store);
  auto grid = c.metrics.empty() && c.constraints.empty()
                  ? result_grid::open(r.dir, c.metric, c.mode)
                  : result_grid::open(r.dir, c.metrics.empty() ? std::vector<objective>{{c.metric, c.mode}} : c.metrics,
                                      c.constraints);
  if (!grid) return grid.error();
  grid->wall_s = sum->wall_s;
  grid->ingested = sum->ingested;
  grid->controller_cpu_s = sum->controller_cpu_s;
  return grid;
}

}  // namespace

tuner::tuner(cluster c, std::string trainable, search_space space, tune_config cfg)
    : cluster_(std::move(c)), trainable_(std::move(trainable)), space_(std::move(space)), cfg_(std::move(cfg)) {}

tuner::tuner(cluster c, program p, search_space space, tune_config cfg)
    : cluster_(std::move(c)), trainable_("program: " + joined_command(p.command)), program_(std::move(p)),
      space_(std::move(space)), cfg_(std::move(cfg)) {}

expected<result_grid> tuner::fit() {
  auto st = cluster_.state();
  if (!st) return status{errc::invalid_argument, "the tuner has no cluster (use tune::init or cluster::start)"};
  if (!program_ && !registry().fns.count(trainable_))
    return status{errc::not_found, "no trainable '" + trainable_ + "' in this program (it has: " +
                                       joined(trainable_names()) + "); register it with TUNE_TRAINABLE"};
  auto plan = make_plan(cfg_);  // the one check of every entry point (tune/tuner/plan.hpp)
  if (!plan) return plan.error();
  fit_run r;
  r.plan = std::move(*plan);
  if (auto s = make_search_and_scheduler(r, space_); !s) return s;
  if (auto s = plan_hooks(r, space_); !s) return s;
  if (auto s = open_resumed(r, trainable_); !s) return s;
  if (auto s = size_on_cluster(r, cluster_); !s) return s;
  if (auto s = make_engine(r, space_); !s) return s;
  if (auto s = choose_dir_and_replay(r); !s) return s;
  start_local_hooks(r);
  if (program_)
    if (auto s = check_trials_program(r, cluster_, *program_, space_); !s) return s;
  if (auto s = open_store_and_self(r); !s) return s;
  if (auto s = record_settings(r, cluster_, trainable_); !s) return s;
  auto ro = run_options(r);
  if (auto s = what_trials_run(r, *st, program_, trainable_, ro); !s) return s;
  return run_and_open_results(r, *st, ro);
}

}  // namespace tune
