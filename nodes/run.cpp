// tune run: an experiment whose trials are any program (docs/run.md), described by a
// file (YAML or JSON) and flags, which override it:
//
//   tune run experiment.yaml
//   tune run experiment.yaml --address HOST:PORT
//   tune run --metric val_acc --mode max --samples 20 --gpus-per-trial 0.25 --space '{"lr": {"loguniform": [1e-4, 0.1]}}' -- python3 train.py --epochs 8
//
// Progress goes to standard error; the last line on standard output is one JSON object:
// best_trial, best_config, best_value, metric, mode, trials, errors, experiment_dir,
// and with several metrics or constraints pareto_front ([{trial, values, config}]),
// metrics, constraints,
// wall_s. results.csv (every result) and trials.json (every trial) are written into the
// experiment folder.
#include <csignal>
#include "run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "controller/controller.hpp"
#include "services/services.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/run/experiment.hpp"
#include "tune/tuner/plan.hpp"
#include "tune/tune.hpp"

namespace po = boost::program_options;

namespace tune::cli {

namespace {

int fail(const std::string& message, int code = 1) {
  std::cerr << "tune run: " << shown_utf8(message) << "\n";  // it may name a file, quote a program's words
  return code;
}

const char* about =
    "Tunes any program: a Python script, a shell script, any executable. Each trial runs the\n"
    "command (an argv, never through a shell) in its own copy of the working directory, on\n"
    "exactly the cards of its bundle, and gets its configuration from `import libtune`\n"
    "(libtune.config(); put on its PYTHONPATH by the node), from ${name} placeholders in the\n"
    "command, or from --config-args append (--key value pairs). It reports with\n"
    "libtune.report(...) or through output lines that match --metric-pattern.\n"
    "Flags override the experiment file; relative paths in the file are from its folder.\n"
    "The last line on standard output is one JSON object with the best trial, its config\n"
    "and metric. tune run --keys lists the file's keys (docs/run.md has them too).";

status bad_flag(const std::string& flag, const std::string& why) { return status{errc::invalid_argument, flag + ": " + why}; }

// --metric, --mode, --samples, --space.
status apply_objective_flags(const po::variables_map& vm, experiment_spec& e) {
  auto& c = e.config;
  if (vm.count("metric")) c.metric = vm["metric"].as<std::string>();
  if (vm.count("mode")) {
    auto m = vm["mode"].as<std::string>();
    if (m != "max" && m != "min") return bad_flag("--mode", "give max or min, not " + m);
    c.mode = m == "max" ? mode::max : mode::min;
  }
  if (vm.count("samples")) {
    if (vm["samples"].as<int>() < 1) return bad_flag("--samples", "give at least 1");
    c.num_samples = vm["samples"].as<int>();
  }
  if (vm.count("space")) {
    auto s = read_search_space(vm["space"].as<std::string>(), "--space");
    if (!s) return s.error();
    if (auto v = s->validate(); !v) return bad_flag("--space", v.message());
    e.space = std::move(*s);
  }
  return status::ok();
}

// --gpus-per-trial and --cpus-per-trial: resources_per_trial's gpu and cpu.
status apply_resource_flags(const po::variables_map& vm, experiment_spec& e) {
  auto& c = e.config;
  for (auto [flag, name] : {std::pair{"gpus-per-trial", "gpu"}, {"cpus-per-trial", "cpu"}}) {
    if (!vm.count(flag)) continue;
    const auto dashed = std::string{"--"} + flag;
    const bool gpu = std::string{name} == "gpu";
    if (!c.bundles.empty()) return bad_flag(dashed, "sets resources_per_trial, but " + e.source + " gives bundles");
    auto set = c.resources_per_trial.set.value_or(resource_set{});
    bool gpu_auto = c.resources_per_trial.gpu_auto;  // the file's gpu: auto stays unless --gpus-per-trial says
    auto text = vm[flag].as<std::string>();
    if (gpu && text == "auto") {
      gpu_auto = true;
    } else {
      char* end = nullptr;
      double amount = std::strtod(text.c_str(), &end);
      if (text.empty() || *end)
        return bad_flag(dashed, "'" + text + "' is not a number" + (gpu ? " (give a share such as 0.25, whole cards, or auto)" : ""));
      if (auto s = set.set(name, amount); !s) return bad_flag(dashed, s.message());
      if (gpu) gpu_auto = false;
    }
    if (!gpu_auto)
      if (auto s = check_request(set); !s) return bad_flag(dashed, s.message());
    c.resources_per_trial = resources(set);
    c.resources_per_trial.gpu_auto = gpu_auto;
  }
  return status::ok();
}

// --scheduler, --search.
status apply_search_flags(const po::variables_map& vm, experiment_spec& e) {
  if (vm.count("scheduler")) {
    auto s = read_scheduler(vm["scheduler"].as<std::string>(), "--scheduler");
    if (!s) return s.error();
    e.config.scheduler = *s;
  }
  if (vm.count("search")) {
    auto s = read_search(vm["search"].as<std::string>(), "--search");
    if (!s) return s.error();
    e.config.search = *s;
  }
  return status::ok();
}

// --metric-pattern, --working-dir, --no-working-dir, --in-place, --env, --config-args.
status apply_program_flags(const po::variables_map& vm, experiment_spec& e) {
  auto& p = e.prog;
  if (vm.count("metric-pattern")) p.metric_patterns = vm["metric-pattern"].as<std::vector<std::string>>();
  if (vm.count("working-dir")) p.working_dir = vm["working-dir"].as<std::string>();
  if (vm["no-working-dir"].as<bool>()) p.working_dir.clear();
  if (vm["in-place"].as<bool>()) {
    if (vm["no-working-dir"].as<bool>()) return bad_flag("--in-place", "runs trials in the working directory: leave out --no-working-dir");
    p.in_place = true;
  }
  if (vm.count("env"))
    for (auto& kv : vm["env"].as<std::vector<std::string>>()) {
      auto eq = kv.find('=');
      auto name = kv.substr(0, eq);
      if (auto s = check_env_name(name); !s) return bad_flag("--env " + kv, s.message());
      if (eq == std::string::npos) p.forward_env.push_back(name);
      else p.env[name] = kv.substr(eq + 1);
    }
  if (vm.count("config-args")) {
    auto a = vm["config-args"].as<std::string>();
    if (a != "none" && a != "append") return bad_flag("--config-args", "give none or append, not " + a);
    p.args = a == "append" ? config_args::append : config_args::none;
  }
  return status::ok();
}

// --max-concurrent, --max-failures, --seed, --max-iterations, --time-budget, --progress,
// --experiment-dir, --name.
status apply_run_flags(const po::variables_map& vm, experiment_spec& e) {
  auto& c = e.config;
  auto at_least = [&](const char* flag, int64_t least, auto& field) -> status {
    if (!vm.count(flag)) return status::ok();
    auto v = vm[flag].as<int64_t>();
    if (v < least) return bad_flag(std::string{"--"} + flag, "give at least " + std::to_string(least));
    field = static_cast<std::remove_reference_t<decltype(field)>>(v);
    return status::ok();
  };
  if (auto s = at_least("max-concurrent", 0, c.max_concurrent_trials); !s) return s;
  if (auto s = at_least("max-failures", 0, c.max_failures); !s) return s;
  if (auto s = at_least("seed", 0, c.seed); !s) return s;
  if (vm.count("max-iterations")) {
    int64_t n = 0;
    if (auto s = at_least("max-iterations", 1, n); !s) return s;
    c.stop.max_iterations = n;
  }
  if (vm.count("time-budget")) {
    auto t = vm["time-budget"].as<double>();
    if (!(t > 0) || !std::isfinite(t)) return bad_flag("--time-budget", "give seconds above 0");
    c.time_budget_s = t;
  }
  if (vm.count("progress")) {
    auto style = parse_progress_style(vm["progress"].as<std::string>());
    if (!style) return bad_flag("--progress", "give auto, table, lines or none");
    c.progress = *style;
  }
  if (vm.count("experiment-dir")) c.experiment_dir = vm["experiment-dir"].as<std::string>();
  if (vm.count("name")) c.name = vm["name"].as<std::string>();
  if (vm.count("driver-fd")) {
    if (vm["driver-fd"].as<int>() < 3) return bad_flag("--driver-fd", "give the socket's descriptor (3 or more)");
    c.driver.fd = vm["driver-fd"].as<int>();
  }
  return status::ok();
}

// The flags, over what the file said, in this order (the first bad one is the error,
// naming its flag).
status apply_flags(const po::variables_map& vm, experiment_spec& e) {
  for (auto apply : {apply_objective_flags, apply_resource_flags, apply_search_flags, apply_program_flags, apply_run_flags})
    if (auto s = apply(vm, e); !s) return s;
  return status::ok();
}

// --- the flags -------------------------------------------------------------------------

po::options_description experiment_flags() {
  po::options_description exp("experiment (each overrides the file)");
  exp.add_options()
      ("metric", po::value<std::string>(), "the reported metric to tune")
      ("mode", po::value<std::string>(), "max or min")
      ("samples", po::value<int>(), "trials (x grid points)")
      ("space", po::value<std::string>(), "the search space, JSON or YAML: '{\"lr\": {\"loguniform\": [1e-4, 0.1]}}'")
      ("gpus-per-trial", po::value<std::string>(), "GPUs per trial: a share below 1 (0.25), whole cards, or auto "
                                                   "(measured: docs/auto_packing.md)")
      ("cpus-per-trial", po::value<std::string>(), "CPUs per trial")
      ("scheduler", po::value<std::string>(), "fifo, asha, hyperband, median_stopping, pbt, or JSON: '{\"type\": \"asha\", \"max_t\": 8}'")
      ("search", po::value<std::string>(), "random, grid, tpe, gp, bohb, or JSON: '{\"type\": \"tpe\", \"n_startup_trials\": 5}'")
      ("metric-pattern", po::value<std::vector<std::string>>()->composing(),
       "read metrics from the program's output lines (RE2; repeatable): 'val_acc=(\\S+)'")
      ("max-iterations", po::value<int64_t>(), "stop a trial at this iteration")
      ("max-concurrent", po::value<int64_t>(), "trials at once (0: as many as fit)")
      ("max-failures", po::value<int64_t>(), "restarts of a failed trial, from its checkpoint")
      ("time-budget", po::value<double>(), "seconds for the whole experiment")
      ("seed", po::value<int64_t>(), "the search's seed")
      ("name", po::value<std::string>(), "the experiment's name")
      ("experiment-dir", po::value<std::string>(), "where the results go (default tune_results/<name>-<time>)")
      ("progress", po::value<std::string>(), "auto, table, lines or none (on standard error)");
  return exp;
}

po::options_description program_flags() {
  po::options_description prog("the trials' program");
  prog.add_options()
      ("working-dir", po::value<std::string>(), "the folder shipped to the nodes (default: this one)")
      ("no-working-dir", po::bool_switch()->default_value(false), "ship nothing: trials run in their own folders")
      ("in-place", po::bool_switch()->default_value(false),
       "run each trial in the working directory itself, not in a copy (relative paths out of it, such as ../data, "
       "work as when you run the script yourself); this machine only, and trials at once share the folder")
      ("env", po::value<std::vector<std::string>>()->composing(), "NAME=VALUE for the trials, or NAME: this shell's value (repeatable)")
      ("config-args", po::value<std::string>(), "append: the configuration as --key value arguments");
  return prog;
}

po::options_description cluster_flags() {
  po::options_description where("the cluster");
  where.add_options()
      ("address", po::value<std::string>(), "HOST:PORT of a head (default: the cluster running on this machine, if one does "
                                            "(as ray.init() finds one), else an embedded cluster)")
      ("local", po::bool_switch()->default_value(false), "run on an embedded cluster even when one runs on this machine")
      ("token-file", po::value<std::string>(), "that cluster's token (default ~/.tune/token)")
      ("tls-cert", po::value<std::string>(), "for a head that uses TLS: this process's certificate (default: $TUNE_TLS_CERT)")
      ("tls-key", po::value<std::string>(), "its key (default: $TUNE_TLS_KEY)")
      ("tls-ca", po::value<std::string>(), "the cluster's CA certificate (default: $TUNE_TLS_CA)")
      ("num-cpus", po::value<double>(), "the embedded cluster's CPUs")
      ("num-gpus", po::value<int>(), "the embedded cluster's GPUs (without cards: logical ones, trials on the CPU)")
      ("dashboard-port", po::value<int>(), "serve the embedded cluster's dashboard on 127.0.0.1:PORT (0: any)")
      ("containment", po::value<std::string>(),
       "how the embedded cluster contains trials: auto (a cgroup each where it can, else a subreaper), cgroup, subreaper")
      ("trial-max-pids", po::value<int64_t>(), "the embedded cluster's limit of processes and threads per trial (0: none)")
      ("trial-user", po::value<std::string>(),
       "the Unix account the embedded cluster's trials run as (default: yours, root included, with your HOME; another "
       "account needs root)")
      ("foreign-threshold", po::value<std::string>(),
       "the embedded cluster never gives a card whole where programs that are not its own hold more GPU memory than "
       "this (default 256MiB)")
      ("foreign-margin", po::value<std::string>(),
       "GPU memory the embedded cluster keeps free beside what other programs hold on a card (default 1GiB)");
  return where;
}

po::options_description driver_flags() {
  po::options_description d("libtune's Python API");
  d.add_options()("driver-fd", po::value<int>(),
                  "the socket on which the Python program that started this experiment answers for its user code "
                  "(Tuner.fit() passes it; docs/hooks.md)");
  return d;
}

po::options_description run_flags() {
  po::options_description desc("tune run options");
  desc.add_options()("help,h", "show this help")("keys", "list the experiment file's keys")(
      "file", po::value<std::string>(), "the experiment file (YAML or JSON)");
  desc.add(experiment_flags()).add(program_flags()).add(cluster_flags()).add(driver_flags());
  return desc;
}

// --- the experiment ----------------------------------------------------------------------

// The experiment: the file, the flags over it, the command after "--" over both; it
// must name a command and a metric. Unnamed, it is named after the file, else the script.
expected<experiment_spec> read_spec(const po::variables_map& vm, const std::vector<std::string>& command) {
  experiment_spec e;
  if (vm.count("file")) {
    auto read = read_experiment_file(vm["file"].as<std::string>());
    if (!read) return read.error();
    e = std::move(*read);
  }
  if (auto s = apply_flags(vm, e); !s) return s;
  if (!command.empty()) e.prog.command = command;
  if (e.prog.command.empty())
    return status{errc::invalid_argument,
                  "say what each trial runs: -- COMMAND... after the flags, or command: [python3, train.py] in the file"};
  if (auto st = resolve_objectives(e.config); !st) return st;
  if (e.config.metric.empty())
    return status{errc::invalid_argument, "say which metric to tune: --metric NAME, or metric: (or metrics:) in the file"};
  if (e.config.name == tune_config{}.name) {  // unnamed: after the file, else the script (train.py: train)
    auto from = vm.count("file") ? vm["file"].as<std::string>() : e.prog.command[e.prog.command.size() > 1 ? 1 : 0];
    if (auto stem = std::filesystem::path(from).stem().string(); !stem.empty()) e.config.name = stem;
  }
  return e;
}

// The embedded cluster's own settings (each asks for one): --containment, --trial-max-pids,
// --trial-user, --foreign-*, --num-*, --dashboard-port.
status embedded_options(const po::variables_map& vm, cluster_options& opt) {
  if (vm.count("trial-user")) opt.trial_user = vm["trial-user"].as<std::string>();
  auto others = parse_others_policy(vm.count("foreign-threshold") ? vm["foreign-threshold"].as<std::string>() : "",
                                    vm.count("foreign-margin") ? vm["foreign-margin"].as<std::string>() : "",
                                    "--foreign-threshold", "--foreign-margin");
  if (!others) return others.error();
  opt.foreign_threshold = others->threshold;
  opt.foreign_margin = others->margin;
  if (vm.count("containment")) {
    opt.containment = vm["containment"].as<std::string>();
    if (opt.containment != "auto" && opt.containment != "cgroup" && opt.containment != "subreaper")
      return status{errc::invalid_argument, "--containment " + opt.containment + ": use auto, cgroup or subreaper"};
  }
  if (vm.count("trial-max-pids")) {
    opt.trial_max_pids = vm["trial-max-pids"].as<int64_t>();
    if (auto s = check_trial_max_pids(opt.trial_max_pids, "--trial-max-pids"); !s) return s;
  }
  if (vm.count("num-cpus")) opt.num_cpus = vm["num-cpus"].as<double>();
  if (vm.count("num-gpus")) opt.num_gpus = vm["num-gpus"].as<int>();
  if (vm.count("dashboard-port")) opt.dashboard_port = vm["dashboard-port"].as<int>();
  return status::ok();
}

// Which cluster: --address (with its token and TLS files), or an embedded one.
expected<cluster_options> cluster_options_from(const po::variables_map& vm) {
  cluster_options opt;
  if (vm.count("address")) opt.address = vm["address"].as<std::string>();
  if (vm.count("token-file")) opt.token_file = vm["token-file"].as<std::string>();
  if (vm.count("tls-cert")) opt.tls_cert = vm["tls-cert"].as<std::string>();
  if (vm.count("tls-key")) opt.tls_key = vm["tls-key"].as<std::string>();
  if (vm.count("tls-ca")) opt.tls_ca = vm["tls-ca"].as<std::string>();
  bool embedded = false;
  for (auto name : {"num-cpus", "num-gpus", "dashboard-port", "containment", "trial-max-pids", "trial-user",
                    "foreign-threshold", "foreign-margin"})
    embedded = embedded || vm.count(name);
  if (!opt.address.empty() && embedded)
    return status{errc::invalid_argument,
                  "--num-cpus, --num-gpus, --dashboard-port, --containment, --trial-max-pids, --trial-user and --foreign-* are "
                  "for the embedded cluster; a cluster at --address has its own (tune start's options)"};
  if (!opt.address.empty() && vm["local"].as<bool>()) return status{errc::invalid_argument, "give --address or --local, not both"};
  opt.local = vm["local"].as<bool>() || embedded;
  if (auto s = embedded_options(vm, opt); !s) return s;
  return opt;
}

// --- the results -------------------------------------------------------------------------

// The export, beside the store: every result (written as read: a trial with millions of
// results is never all in memory), and every trial.
expected<std::vector<trial_row>> write_exports(const result_grid& results) {
  {
    std::ofstream csv(results.dir() + "/results.csv");
    if (auto s = write_results_csv(results.store(), csv); !s) std::cerr << "tune run: results.csv: " << s.message() << "\n";
  }
  auto trials = results.trials();
  if (trials) {
    nlohmann::json list = nlohmann::json::array();
    for (auto& t : *trials)
      list.push_back({{"id", t.id}, {"config", t.config}, {"state", t.state}, {"error", t.error}, {"info", t.info}});
    std::ofstream(results.dir() + "/trials.json") << json_text(list, 1) << "\n";
  }
  return trials;
}

// The last line on standard output: the best trial, and with several metrics or
// constraints the Pareto front.
nlohmann::json summary(const tune_config& c, const result_grid& results, const std::optional<best_trial>& best,
                       const expected<std::vector<trial_row>>& trials) {
  nlohmann::json out{{"best_trial", best ? nlohmann::json(best->id) : nlohmann::json()},
                     {"best_config", best ? best->config : nlohmann::json()},
                     {"best_value", best ? nlohmann::json(best->value) : nlohmann::json()},
                     {"metric", c.metric},
                     {"mode", c.mode == mode::max ? "max" : "min"},
                     {"trials", trials ? trials->size() : 0},
                     {"errors", results.errors()},
                     {"results", results.results},
                     {"wall_s", results.wall_s},
                     {"experiment_dir", std::filesystem::absolute(results.dir()).lexically_normal().string()}};
  if (c.metrics.size() <= 1 && c.constraints.empty()) return out;
  auto front = results.pareto_front();
  nlohmann::json list = nlohmann::json::array();
  if (front)
    for (auto& f : *front) list.push_back({{"trial", f.id}, {"values", f.values}, {"config", f.config}});
  out["pareto_front"] = list;
  nlohmann::json names = nlohmann::json::array();
  for (auto& o : c.metrics) names.push_back({{"metric", o.name}, {"mode", o.direction == mode::max ? "max" : "min"}});
  out["metrics"] = names;
  out["constraints"] = c.constraints;
  return out;
}

// --- stop signals ------------------------------------------------------------------------

// SIGINT and SIGTERM (a terminal's Ctrl-C, kill, the Python driver's Ctrl-C and
// fail_fast): the first ends the experiment through its usual end, as an error would:
// its controller stops its trials (the store keeps them as interrupted, for a resume),
// fit() returns, the embedded cluster ends and removes its folder, and the exit code is
// 128 + the signal. Another one meanwhile changes nothing (a terminal's Ctrl-C reaches
// the Python driver too, which passes it on); a stop that hangs ends after a minute.
std::atomic<int> stop_signal{0};
int stop_pipe[2] = {-1, -1};

std::string signal_name(int sig) { return std::string{"SIG"} + sigabbrev_np(sig); }

void on_stop_signal(int sig) {
  int none = 0;
  stop_signal.compare_exchange_strong(none, sig);
  int saved = errno;
  char byte = 0;
  (void)!::write(stop_pipe[1], &byte, 1);
  errno = saved;
}

// From the start: a signal that comes while the cluster starts is acted on once it runs.
void catch_stop_signals() {
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) return;  // then they end it at once, as before
  ::fcntl(stop_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM}) ::sigaction(s, &sa, nullptr);  // exec resets it: no trial inherits it
}

// The thread that acts on the first, once the cluster runs (after the embedded node's
// spawner was forked, which wants no thread beside it).
void act_on_stop_signals() {
  if (stop_pipe[0] < 0) return;
  std::thread([] {
    char byte;
    while (::read(stop_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    int sig = stop_signal.load();
    interrupt_experiments("stopped by " + signal_name(sig));
    std::this_thread::sleep_for(std::chrono::minutes(1));
    std::cerr << "tune run: the stop after " << signal_name(sig) << " took over a minute; exiting now\n";
    std::_Exit(128 + sig);
  }).detach();
}

// Runs the experiment on the cluster; the exit code.
int run_on(const cluster& c, const experiment_spec& e) {
  std::cerr << "tune run: " << e.config.num_samples << " trial(s) of `";
  for (size_t i = 0; i < e.prog.command.size(); ++i) std::cerr << (i ? " " : "") << e.prog.command[i];
  std::cerr << "` on " << c.description() << "\n";
  tuner t{c, e.prog, e.space, e.config};
  auto results = t.fit();
  if (int sig = stop_signal.load(); sig && !results) {
    std::cerr << "tune run: stopped by " << signal_name(sig) << ": its trials were stopped; the experiment "
              << "folder keeps what they did (tune resume DIR continues it)\n";
    return 128 + sig;
  }
  if (!results) return fail(results.error().message());
  auto best = results->best();
  if (!best) return fail(best.error().message());
  auto trials = write_exports(*results);
  auto out = summary(e.config, *results, *best, trials);
  if (!*best)
    std::cerr << "tune run: no trial reported " << e.config.metric << " (" << results->errors()
              << " ended in error; their errors are in " << results->dir() << "/results.csv)\n";
  std::cout << json_text(out) << std::endl;
  return *best ? 0 : 1;
}

}  // namespace

int cmd_run(const std::vector<std::string>& all_args) {
  // A reader of its output that is gone (the driver that ran it, killed; `| head`) is a
  // write that fails, not a SIGPIPE that ends it at once: it ends as it should, its
  // trials stopped and its embedded cluster's folder removed.
  std::signal(SIGPIPE, SIG_IGN);
  catch_stop_signals();
  // Everything after "--" is the command, untouched.
  std::vector<std::string> args, command;
  bool after = false;
  for (auto& a : all_args) {
    if (!after && a == "--") after = true;
    else (after ? command : args).push_back(a);
  }
  auto desc = run_flags();
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return fail(std::string{e.what()} + " (see tune run --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << "usage: tune run [FILE] [flags] [-- COMMAND...]\n\n" << about << "\n\n" << desc;
    return 0;
  }
  if (vm.count("keys")) {
    std::cout << "The keys of an experiment file (docs/run.md):\n" << experiment_keys_text();
    return 0;
  }
  auto spec = read_spec(vm, command);  // a bad experiment: 2, before any cluster starts
  if (!spec) return fail(spec.error().message(), 2);
  auto opt = cluster_options_from(vm);
  if (!opt) return fail(opt.error().message(), 2);
  auto c = cluster::start(*opt);
  if (!c) return fail(c.error().message());
  act_on_stop_signals();
  return run_on(*c, *spec);
}

}  // namespace tune::cli
