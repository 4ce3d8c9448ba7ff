#include "launch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/trial/command.hpp"
#include "tune/trial/mps.hpp"

namespace tune {

std::vector<wire::wire_trial_card> trial_cards(const trial_options& opt) {
  std::vector<wire::wire_trial_card> list;
  for (size_t i = 0; i < opt.cards.size(); ++i) {
    auto& c = opt.cards[i];
    auto& g = opt.grants[i];
    list.push_back({static_cast<int32_t>(i), c.index, c.uuid, c.pci_bus_id, g.share.to_double(), g.memory, c.logical});
  }
  return list;
}

nlohmann::json gpus_json(const trial_options& opt) {
  nlohmann::json list = nlohmann::json::array();
  for (auto& c : trial_cards(opt)) list.push_back(wire::to_json(c));
  return list;
}

// What a trial needs whether a new worker starts it or an idle one is handed it: the
// output patterns compiled, a fresh copy of its working directory, its program found.
status prepare_files(launch& l, std::optional<output_metrics>& metrics) {
  if (!l.patterns.empty()) {
    auto m = output_metrics::make(l.patterns, l.metric);
    if (!m) return m.error();
    metrics = std::move(*m);
  }
  {  // in its folder as its account: a link an earlier run left there leads nowhere it could not write
    as_account as(l.account);
    if (l.workdir) {  // a fresh copy on every start: what an earlier run changed is gone
      std::error_code ec;
      std::filesystem::remove_all(l.spec.cwd, ec);
      if (auto s = materialize_workdir(*l.workdir, l.blobs, l.spec.cwd); !s)
        return status{s.code(), "its working directory: " + s.message()};
    }
    if (l.find_program) {
      auto path = l.spec.env.count("PATH") ? l.spec.env.at("PATH") : std::string{};
      auto program = resolve_program(l.spec.argv[0], l.spec.cwd, path);
      if (!program) return program.error();
      l.spec.argv[0] = *program;
    }
  }
  return status::ok();
}

// What a new worker needs besides: its cgroup made (with its host limits, which its
// keeper joins before the worker starts). The cgroup, or why not.
expected<std::unique_ptr<trial_cgroup>> prepare(launch& l, std::optional<output_metrics>& metrics) {
  if (auto s = prepare_files(l, metrics); !s) return s;
  std::unique_ptr<trial_cgroup> cg;
  if (l.contain) {
    auto made = l.contain->make(l.trial_id, l.limits);
    if (!made) return made.error();
    cg = std::move(*made);
    l.spec.contain = cg->spec();
  }
  return cg;
}

// The end of the trial is the end of all it started: its cgroup is killed, waited for
// until empty and removed (as a subreaper, the keeper has killed what was left). What
// its cgroup measured, and what it left behind.
// What its cgroup measured for this trial: what it counts since `before` (a reused
// worker's cgroup counted its earlier trials too; its memory peak is the worker's).
host_usage cgroup_usage(const launch& l, trial_cgroup& cg, const host_usage& before, wire::wire_trial_end& host) {
  auto u = cg.usage();
  host.host_memory = u.memory;
  host.host_memory_peak = u.memory_peak;
  host.cpu_seconds = u.cpu_seconds >= 0 && before.cpu_seconds >= 0 ? u.cpu_seconds - before.cpu_seconds : u.cpu_seconds;
  host.pids = u.pids;
  host.containment = l.contain->caps().kind();
  host.oom_kills = std::max<int64_t>(u.oom_kills - std::max<int64_t>(before.oom_kills, 0), 0);
  host.pids_refused = std::max<int64_t>(u.pids_refused - std::max<int64_t>(before.pids_refused, 0), 0);
  return u;
}

wire::wire_trial_end end_cgroup(const launch& l, trial_cgroup* cg, worker_process& w, const host_usage& before) {
  wire::wire_trial_end host;
  if (!cg) return host;
  cgroup_usage(l, *cg, before, host);
  auto escaped = cg->end(w.group());
  if (escaped) host.left_behind = *escaped;
  else host.containment_error = escaped.error().message();
  host.left_behind_count = host.left_behind.empty() ? static_cast<int64_t>(w.left_behind())
                                                    : static_cast<int64_t>(host.left_behind.size());
  return host;
}

// Takes `line` out of `lines` if it is there (with `and_after`, what followed it too).
bool take_line(std::vector<std::string>& lines, const char* line, bool and_after) {
  auto it = std::find(lines.begin(), lines.end(), line);
  if (it == lines.end()) return false;
  lines.erase(it, and_after ? lines.end() : it + 1);
  return true;
}

// The worker's side of the hand-over protocol in its environment.
void reuse_environment(process_spec& spec, const std::string& dir, std::chrono::milliseconds linger) {
  spec.env["TUNE_REUSE_DIR"] = dir;
  spec.env["TUNE_REUSE_WAIT_MS"] = std::to_string(linger.count() + 1000);  // the node ends it first
}

// A fresh worker's hand-over folder: <root>/<trial>, the worker's account's, 0700.
// Empty (and said in the log) when it cannot be made: the worker is then not reused.
std::string hand_over_folder(const launch& l) {
  auto dir = l.reuse_root + "/" + l.trial_id;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (!ec && ::chmod(dir.c_str(), 0700) == 0 &&
      (l.spec.run_as.uid < 0 ||
       ::chown(dir.c_str(), static_cast<uid_t>(l.spec.run_as.uid), static_cast<gid_t>(l.spec.run_as.gid)) == 0))
    return dir;
  log_line("trial " + l.trial_id + ": no hand-over folder for its worker (" + dir + "): not reused");
  std::filesystem::remove_all(dir, ec);
  return "";
}

// An idle worker of the experiment's on the trial's cards takes the trial: it is handed
// the trial's environment and folder and says it took them (at most 3 s). False (and
// the worker and its cgroup ended) when it did not; `lines`: what it reported right after.
bool adopt(reuse::idle_worker& w, const process_spec& spec, const unix_account& account, std::vector<std::string>& lines) {
  status handed = status::ok();
  {
    as_account as(account);  // in its account's folder: as that account
    handed = reuse::hand_over(w, spec);
  }
  if (auto& s = handed; !s) {
    log_line("trial " + w.trial_id + "'s worker could not be handed the next trial: " + s.message());
    reuse::idle_pool::end(w);
    return false;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    bool open = w.process->poll(std::chrono::milliseconds(20), lines);
    if (take_line(lines, reuse::adopted_line)) return true;
    if (!open || w.process->try_wait()) break;
  }
  log_line("trial " + w.trial_id + "'s worker did not take the next trial: started anew");
  reuse::idle_pool::end(w);
  lines.clear();
  return false;
}

launch make_launch(const trial_options& opt) {
  launch l;
  l.node_id = opt.node_id;
  l.trial_id = opt.spec.trial_id;
  l.contain = opt.contain;
  l.limits = opt.limits;
  l.account = opt.account;
  if (opt.account.switches)
    l.spec.run_as = {opt.account.uid, opt.account.gid, {opt.account.groups.begin(), opt.account.groups.end()}};
  l.spec.env = trial_environment(opt);
  l.spec.cwd = opt.trial_dir;
  l.programs = opt.programs;
  if (!opt.spec.command.empty()) {  // a program trial: its command, in its working copy
    l.spec.argv = opt.spec.command;
    l.find_program = true;
    l.pythons = opt.pythons;
    l.patterns = opt.spec.output_patterns;
    l.metric = opt.spec.metric;
    if (opt.workdir) {
      l.workdir = opt.workdir;
      l.blobs = opt.workdir_blobs;
      l.spec.cwd = opt.trial_dir + "/work";
    } else if (!opt.spec.workdir_path.empty()) {  // in place: the folder itself, no copy
      l.spec.cwd = opt.spec.workdir_path;
    }
  } else {
    l.spec.argv = {opt.program};
    l.spec.argv.insert(l.spec.argv.end(), opt.spec.args.begin(), opt.spec.args.end());
  }
  l.idle = opt.idle;
  for (auto& c : opt.cards) l.cards.insert(c.uuid);
  // A tuner's trial (its id names its experiment: <id>@<run key>). Its worker is kept
  // only if it speaks the hand-over protocol (a C++ trainable's, a Python script run by
  // the warm interpreter); any other program ignores TUNE_REUSE_DIR and ends as usual.
  auto at = opt.spec.trial_id.rfind('@');
  l.forward_output = opt.spec.forward_output;
  l.reuse = opt.spec.reuse_worker && opt.idle && at != std::string::npos && !opt.reuse_root.empty();
  if (l.reuse) {
    l.reuse_key = reuse::key_of(l.spec, opt.spec.trial_id.substr(at + 1), l.limits);
    l.reuse_root = opt.reuse_root;
  }
  return l;
}

std::map<std::string, std::string> trial_environment(const trial_options& opt) {
  auto env = opt.base_env;
  // What the experiment adds (its names checked by the node: none of those set below).
  for (auto& kv : opt.spec.env)
    if (auto eq = kv.find('='); eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  std::string visible;
  for (auto& c : opt.cards) visible += (visible.empty() ? "" : ",") + c.uuid;
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["CUDA_VISIBLE_DEVICES"] = visible;  // empty: no card at all
  // The id its experiment knows it by: a tuner's trial ids travel as <id>@<run key>
  // (unique in the cluster: its folder's name), the program sees <id>.
  env["TUNE_TRIAL_ID"] = wire::trial_of_worker(opt.spec.trial_id.substr(0, opt.spec.trial_id.rfind('@')));
  env["TUNE_NODE_ID"] = opt.node_id;
  // A gang's worker: PyTorch's rendezvous, as torchrun sets it (docs/workers.md).
  if (auto& g = opt.spec.gang; g.world_size > 0) {
    env["RANK"] = env["ROLE_RANK"] = std::to_string(g.rank);
    env["WORLD_SIZE"] = env["ROLE_WORLD_SIZE"] = std::to_string(g.world_size);
    env["LOCAL_RANK"] = std::to_string(g.local_rank);
    env["LOCAL_WORLD_SIZE"] = std::to_string(g.local_world_size);
    env["GROUP_RANK"] = env["NODE_RANK"] = std::to_string(g.node_rank);
    env["GROUP_WORLD_SIZE"] = std::to_string(g.nodes);
    env["ROLE_NAME"] = "default";
    env["MASTER_ADDR"] = g.master_addr;
    env["MASTER_PORT"] = std::to_string(g.master_port);
    env["TORCHELASTIC_RUN_ID"] = env["TUNE_TRIAL_ID"];
  }
  env["TUNE_TRIAL_DIR"] = opt.trial_dir;
  // Another account than the node's: its own home when it has one it can write, else its
  // folder (caches go somewhere it may write, never the node's home).
  if (opt.account.switches) {
    struct stat h {};
    bool own_home = !opt.account.home.empty() && ::stat(opt.account.home.c_str(), &h) == 0 && S_ISDIR(h.st_mode) &&
                    h.st_uid == opt.account.uid;
    env["HOME"] = own_home ? opt.account.home : opt.trial_dir;
    env["USER"] = env["LOGNAME"] = opt.account.name;
  }
  env["TUNE_TRIAL_CONFIG"] = opt.spec.config_json.empty() ? "{}" : opt.spec.config_json;
  env["TUNE_TRIAL_GPUS"] = json_text(gpus_json(opt));
  env["TUNE_REPORT_FD"] = std::to_string(worker_process::report_fd);
  // The node's Python module first on PYTHONPATH (`import libtune` needs nothing installed).
  if (!opt.python_path.empty())
    env["PYTHONPATH"] = opt.python_path + (env.count("PYTHONPATH") && !env["PYTHONPATH"].empty() ? ":" + env["PYTHONPATH"] : "");
  if (!opt.spec.restore_dir.empty()) env["TUNE_RESTORE_DIR"] = opt.spec.restore_dir;
  // Thread pools (OpenMP, OpenBLAS, MKL) sized to the CPUs the trial holds, not to the
  // machine's, unless the node's own environment says otherwise.
  if (opt.cpu_threads > 0)
    for (auto name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
      if (!env.count(name)) env[name] = std::to_string(opt.cpu_threads);
  if (!opt.grants.empty()) env["TUNE_GPU_MEMORY_QUOTA"] = std::to_string(opt.grants[0].memory);
  // Under the node's MPS daemon the driver enforces each card's quota at allocation.
  if (env.count("CUDA_MPS_PIPE_DIRECTORY") && !opt.cards.empty() && !opt.cards[0].logical) {
    std::vector<int64_t> quotas;
    for (auto& g : opt.grants) quotas.push_back(g.memory);
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = mps_daemon::memory_limits(quotas);
  }
  return env;
}

}  // namespace tune
