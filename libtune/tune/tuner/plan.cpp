#include "tune/tuner/plan.hpp"

#include <algorithm>
#include <set>

#include "tune/core/json_text.hpp"

namespace tune {

resources::resources(std::initializer_list<std::pair<std::string_view, amount>> values) {
  resource_set r;
  for (auto& [name, a] : values) {
    if (name == "gpu" && a.text == "auto") {
      gpu_auto = true;
      continue;
    }
    auto st = a.text.empty() ? r.set(name, a.value) : r.set(name, a.text);
    if (!st) {
      error = st.message();
      if (!a.text.empty() && name == "gpu")
        error = "gpu is \"" + a.text + "\": give a number (0.25, 1, 2) or \"auto\" (auto-packing)";
      return;
    }
  }
  set = std::move(r);
}

namespace {

status check_objective_names(const tune_config& c) {
  std::set<std::string> seen;
  for (const auto& o : c.metrics) {
    if (o.name.empty()) return status{errc::invalid_argument, "metrics: an objective has no name"};
    if (!seen.insert(o.name).second)
      return status{errc::invalid_argument, "metrics: \"" + o.name + "\" is given twice"};
  }
  for (const auto& n : c.constraints) {
    if (n.empty()) return status{errc::invalid_argument, "constraints: a constraint has no name"};
    if (!seen.insert(n).second)
      return status{errc::invalid_argument, "constraints: \"" + n + "\" is given twice, or is also an objective"};
  }
  return status::ok();
}

bool is_text_map(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  for (auto& [k, v] : j.items())
    if (!v.is_string() && !v.is_number() && !v.is_boolean()) return false;
  return true;
}

bool is_text_list(const nlohmann::json& j) {
  return j.is_array() && std::all_of(j.begin(), j.end(), [](const nlohmann::json& v) { return v.is_string(); });
}

// The counts and times of a plan.
status check_limits(const tune_config& c) {
  if (c.num_samples < 1) return status{errc::invalid_argument, "num_samples must be at least 1"};
  if (c.max_concurrent_trials < 0) return status{errc::invalid_argument, "max_concurrent_trials must be 0 (as many as fit) or more"};
  if (c.max_failures < 0) return status{errc::invalid_argument, "max_failures must be 0 (no restarts) or more"};
  if (!(c.group_timeout_s > 0) || !(c.stop_grace_s >= 0))
    return status{errc::invalid_argument, "group_timeout_s must be positive and stop_grace_s not negative"};
  return status::ok();
}

// One bundle of the plan (`what` names it in errors); gpu "auto" asks for the probe's share.
expected<resource_set> bundle_of(const resources& r, const std::string& what, const tune_config& c) {
  if (!r.error.empty()) return status{errc::invalid_argument, what + ": " + r.error};
  if (!r.gpu_auto) {
    if (!r.set || r.set->empty()) return status{errc::invalid_argument, what + " is empty: ask for at least one CPU or GPU"};
    return *r.set;
  }
  if (!c.bundles.empty())
    return status{errc::invalid_argument, what + ": gpu \"auto\" is for resources_per_trial (one bundle), not bundles"};
  if (r.set && r.set->gpu_memory() > 0)
    return status{errc::invalid_argument, what + ": gpu \"auto\" sizes each trial's GPU memory itself; drop gpu_memory, "
                                                 "or give a share instead of auto"};
  if (auto ok = check(c.auto_packing); !ok) return ok;
  auto b = r.set.value_or(resource_set{});
  auto probe = quantity::from_double(c.auto_packing.probe_share, "auto_packing.probe_share");
  if (!probe) return probe.error();
  b.set_gpu(*probe);
  return b;
}

// The user code of the plan and the driver's part: a driver serves what the experiment
// file says it does, a C++ program's hooks are its own; the two do not mix (a Python
// driver's experiment runs no C++ of the user's).
status check_hooks(const tune_config& c) {
  for (auto& s : c.stoppers)
    if (auto st = check_stopper(s); !st) return st;
  for (auto& cb : c.callbacks)
    if (!cb) return status{errc::invalid_argument, "callbacks: one of them is null: give an object (std::make_shared)"};
  if (auto* s = std::get_if<std::shared_ptr<searcher>>(&c.search); s && !*s)
    return status{errc::invalid_argument, "search: the searcher is null: give an object (std::make_shared)"};
  if (auto* s = std::get_if<std::shared_ptr<user_scheduler>>(&c.scheduler); s && !*s)
    return status{errc::invalid_argument, "scheduler: the scheduler is null: give an object (std::make_shared)"};
  if (c.resources_fn && (!c.bundles.empty() || c.resources_per_trial.gpu_auto))
    return status{errc::invalid_argument,
                  "resources_fn gives each trial its resources: leave out bundles and resources_per_trial's gpu \"auto\""};
  if (c.checkpoints.num_to_keep < 0)
    return status{errc::invalid_argument, "checkpoints.num_to_keep must be 0 (keep every checkpoint) or more"};
  if (!c.checkpoints.score_attribute.empty() && c.checkpoints.num_to_keep == 0)
    return status{errc::invalid_argument, "checkpoints.score_attribute (" + c.checkpoints.score_attribute +
                                              ") chooses which checkpoints num_to_keep keeps: give num_to_keep too"};
  const auto& d = c.driver;
  if (d.fd < 0 && d.serves.any())
    return status{errc::invalid_argument,
                  "this experiment's user code (its callbacks, stoppers, searcher or scheduler) runs in the Python "
                  "program that started it: run it from Python (Tuner(...).fit(), or Tuner.restore(path, trainable) to "
                  "continue it), not on its own"};
  if (d.fd >= 0 && !(d.timeout_s > 0)) return status{errc::invalid_argument, "driver.timeout_s must be above 0"};
  bool cpp = !c.callbacks.empty() || !user_stoppers(c.stoppers).empty() || c.resources_fn ||
             std::holds_alternative<std::shared_ptr<searcher>>(c.search) ||
             std::holds_alternative<std::shared_ptr<user_scheduler>>(c.scheduler);
  if (cpp && d.serves.any())
    return status{errc::invalid_argument, "an experiment's hooks are a C++ program's or a Python driver's, not both"};
  if (d.serves.suggests && d.searcher.empty()) return status{errc::invalid_argument, "driver: name its searcher"};
  return status::ok();
}

}  // namespace

status resolve_objectives(tune_config& c) {
  if (auto s = check_objective_names(c); !s) return s;
  if (!c.metrics.empty()) {
    if (!c.metric.empty() && c.metric != c.metrics.front().name)
      return status{errc::invalid_argument, "metric is \"" + c.metric + "\" but metrics starts with \"" +
                                                c.metrics.front().name + "\": give metrics alone (its first is the metric)"};
    c.metric = c.metrics.front().name;
    c.mode = c.metrics.front().direction;
  }
  const bool several = c.metrics.size() > 1;
  if (auto* t = std::get_if<tpe_search>(&c.search); t && several) {
    t->directions.clear();
    for (const auto& o : c.metrics) t->directions.push_back(o.direction);
  }
  const char* refuses = std::holds_alternative<gp_search>(c.search) ? "gp" : std::holds_alternative<bohb_search>(c.search) ? "bohb" : nullptr;
  if (refuses && (several || !c.constraints.empty()))
    return status{errc::invalid_argument, std::string(refuses) + " models one objective without constraints; use tpe for " +
                                              (several ? "several objectives" : "constraints")};
  return status::ok();
}

const std::vector<std::pair<std::string, std::string>>& tracker_keys(std::string_view tracker) {
  static const std::vector<std::pair<std::string, std::string>> mlflow{
      {"tracking_uri", "text"},    {"registry_uri", "text"},       {"experiment_name", "text"},
      {"tags", "a mapping of text"}, {"tracking_token", "text"},   {"save_artifact", "true or false"}};
  static const std::vector<std::pair<std::string, std::string>> wandb{
      {"project", "text"},          {"group", "text"},              {"entity", "text"},
      {"mode", "online, offline or disabled"}, {"dir", "text"},    {"api_key_file", "text"},
      {"tags", "a list of text"},   {"notes", "text"},              {"job_type", "text"},
      {"upload_checkpoints", "true or false"}, {"log_config", "true or false"},
      {"excludes", "a list of text"}, {"init_timeout", "seconds > 0"}};
  static const std::vector<std::pair<std::string, std::string>> none;
  return tracker == "mlflow" ? mlflow : tracker == "wandb" ? wandb : none;
}

status check_tracker(std::string_view tracker, const nlohmann::json& options) {
  auto name = std::string{tracker};
  const auto& keys = tracker_keys(tracker);
  if (keys.empty()) return status{errc::invalid_argument, name + ": not a tracker (libtune has mlflow and wandb)"};
  if (options.is_null()) return status::ok();
  std::string known;
  for (auto& [k, _] : keys) known += (known.empty() ? "" : ", ") + k;
  if (!options.is_object())
    return status{errc::invalid_argument, name + ": give a mapping of its options (" + known + "), or {} for its defaults"};
  for (auto& [k, v] : options.items()) {
    auto it = std::find_if(keys.begin(), keys.end(), [&](auto& e) { return e.first == k; });
    if (it == keys.end())
      return status{errc::invalid_argument, name + ": " + k + ": unknown option; " + name + " has: " + known};
    const auto& type = it->second;
    bool ok = type == "text"                    ? v.is_string()
              : type == "true or false"         ? v.is_boolean()
              : type == "a mapping of text"     ? is_text_map(v)
              : type == "a list of text"        ? is_text_list(v)
              : type == "seconds > 0"           ? v.is_number() && v.get<double>() > 0
                                                : v.is_string() && (v == "online" || v == "offline" || v == "disabled");
    if (!ok) return status{errc::invalid_argument, name + ": " + k + ": give " + type};
  }
  return status::ok();
}

// A gang's bundles: one per worker, each of its resources (the errors name workers.*).
expected<std::vector<resource_set>> workers_of(const tune_config& c) {
  auto& w = *c.workers;
  constexpr int most = 4096;
  if (w.count < 1 || w.count > most)
    return status{errc::invalid_argument, "workers.count is " + std::to_string(w.count) + ": give 1 to " +
                                              std::to_string(most) + " worker processes per trial"};
  if (!(w.join_timeout_s >= 0))
    return status{errc::invalid_argument, "workers.join_timeout_s must be 0 (no limit) or a number of seconds"};
  if (!c.bundles.empty())
    return status{errc::invalid_argument, "workers gives each worker a bundle of its own (workers.resources): "
                                          "leave out bundles"};
  if (c.resources_per_trial.gpu_auto || w.per_worker.gpu_auto)
    return status{errc::invalid_argument, "workers: gpu \"auto\" is for a trial of one process; give each worker's "
                                          "GPUs (workers.resources: {gpu: 1})"};
  if (c.resources_fn)
    return status{errc::invalid_argument, "workers: resources_fn is for a trial of one process; give each worker's "
                                          "resources in workers.resources"};
  auto one = bundle_of(w.per_worker, "workers.resources", c);
  if (!one) return one.error();
  return std::vector<resource_set>(static_cast<size_t>(w.count), *one);
}

expected<experiment_plan> make_plan(tune_config c) {
  if (auto s = resolve_objectives(c); !s) return s;
  if (auto s = check_limits(c); !s) return s;
  for (auto* t : {"mlflow", "wandb"})
    if (auto s = check_tracker(t, std::string_view{t} == "mlflow" ? c.mlflow : c.wandb); !s) return s;
  if ((!c.mlflow.is_null() || !c.wandb.is_null()) && c.tracker_python.empty())
    return status{errc::invalid_argument, "tracker_python is empty: give the Python that has mlflow or wandb"};
  if (auto s = check_hooks(c); !s) return s;
  experiment_plan plan;
  if (c.workers) {
    auto b = workers_of(c);
    if (!b) return b.error();
    plan.bundles = std::move(*b);
    plan.world_size = static_cast<uint32_t>(plan.bundles.size());
    plan.config = std::move(c);
    return plan;
  }
  plan.gpu_auto = c.bundles.empty() && c.resources_per_trial.gpu_auto;
  if (c.bundles.empty()) {
    auto b = bundle_of(c.resources_per_trial, "resources_per_trial", c);
    if (!b) return b.error();
    plan.bundles.push_back(std::move(*b));
  }
  for (size_t i = 0; i < c.bundles.size(); ++i) {
    auto b = bundle_of(c.bundles[i], "bundle " + std::to_string(i), c);
    if (!b) return b.error();
    plan.bundles.push_back(std::move(*b));
  }
  plan.config = std::move(c);
  return plan;
}

namespace {

// The searcher where hooks run (a C++ program's, the Python driver's), as the engine
// holds it: its name and mode; the engine never asks it (with hooks_suggest, its
// configurations come from the hooks).
class hooks_search final : public search_algorithm {
 public:
  hooks_search(std::string name, mode m) : search_algorithm(m), name_(std::move(name)) {}
  bool finished() const override { return false; }
  std::string name() const override { return name_; }

 protected:
  expected<std::optional<config>> next_config(const std::string&) override {
    return status{errc::inconsistent, name_ + " runs where the hooks run: the engine asks it through them"};
  }

 private:
  std::string name_;
};

expected<std::unique_ptr<search_algorithm>> make_hooks_search(const std::string& name, mode m) {
  if (name.empty()) return status{errc::invalid_argument, "the searcher has no name (searcher::name())"};
  return std::unique_ptr<search_algorithm>(new hooks_search(name, m));
}

}  // namespace

expected<std::unique_ptr<search_algorithm>> make_search(const experiment_plan& plan, const search_space& space) {
  const auto& c = plan.config;
  if (c.driver.serves.suggests) {
    if (space.grid().size() > 1)
      return status{errc::invalid_argument, c.driver.searcher + " suggests every configuration: grid_search is for "
                                                                "libtune's random search (BasicVariantGenerator)"};
    return make_hooks_search(c.driver.searcher, c.mode);
  }
  return std::visit(
      [&](const auto& spec) -> expected<std::unique_ptr<search_algorithm>> {
        using T = std::decay_t<decltype(spec)>;
        if constexpr (std::is_same_v<T, random_search_alg>)
          return make_random_search(
              space, {.num_samples = c.num_samples, .seed = c.seed, .points_to_evaluate = spec.points_to_evaluate});
        else if constexpr (std::is_same_v<T, grid_search_alg>)
          return make_grid_search(space, {.num_samples = c.num_samples});
        else if constexpr (std::is_same_v<T, std::shared_ptr<searcher>>)
          return make_hooks_search(spec->name(), c.mode);
        else {  // TPE, the GP and BOHB: the experiment's mode, samples and seed
          auto o = spec;
          o.metric_mode = c.mode;
          o.num_samples = c.num_samples;
          o.seed = c.seed;
          if constexpr (std::is_same_v<T, gp_search>) return make_gp(space, std::move(o));
          else if constexpr (std::is_same_v<T, bohb_search>) return make_bohb(space, std::move(o));
          else return make_tpe(space, std::move(o));
        }
      },
      c.search);
}

scheduler_spec scheduler_of(const experiment_plan& plan) {
  auto spec = plan.config.scheduler;
  if (auto* p = std::get_if<pbt>(&spec); p && p->seed == 0) p->seed = plan.config.seed;
  return spec;
}

std::optional<local_hooks_setup> local_hooks_of(const experiment_plan& plan, std::string saved_state) {
  const auto& c = plan.config;
  local_hooks_setup s;
  s.callbacks = c.callbacks;
  s.stoppers = user_stoppers(c.stoppers);
  if (auto* p = std::get_if<std::shared_ptr<searcher>>(&c.search)) s.search = *p;
  if (auto* p = std::get_if<std::shared_ptr<user_scheduler>>(&c.scheduler)) s.scheduler = *p;
  if (c.resources_fn)
    s.resources = [fn = c.resources_fn](const config& cfg) -> nlohmann::json {
      auto r = fn(cfg);
      if (!r.error.empty()) return {{"error", r.error}};
      if (r.gpu_auto) return {{"error", "gpu \"auto\" is for resources_per_trial, not a trial's own request"}};
      if (!r.set || r.set->empty()) return {{"error", "it asks for nothing: ask for at least one CPU or GPU"}};
      return nlohmann::json::parse(r.set->to_json());
    };
  if (auto* p = std::get_if<pbt>(&c.scheduler)) {
    s.explore = p->custom_explore;
    for (auto& m : p->hyperparameter_mutations)
      if (m.sample) s.samplers[m.key] = m.sample;
  }
  bool any = !s.callbacks.empty() || !s.stoppers.empty() || s.search || s.scheduler || s.resources || s.explore ||
             !s.samplers.empty();
  if (!any) return std::nullopt;
  s.saved_state = std::move(saved_state);
  return s;
}

expected<std::optional<trial_resources>> trial_resources_of(const nlohmann::json& j, const std::string& trial) {
  auto bad = [&](const std::string& why) { return status{errc::invalid_argument, trial + "'s resources: " + why}; };
  if (j.is_null()) return std::optional<trial_resources>{};
  if (!j.is_object()) return bad("give a mapping of amounts ({\"cpu\": 1, \"gpu\": 0.5}), not " + json_text(j));
  if (j.contains("error") && j["error"].is_string()) return bad(j["error"].get<std::string>());
  trial_resources out;
  auto one = [&](const nlohmann::json& b, const std::string& what) -> status {
    auto set = resource_set::from_json(json_text(b));
    if (!set) return bad(what + set.error().message());
    if (set->empty()) return bad(what + "it asks for nothing: ask for at least one CPU or GPU");
    if (auto st = check_request(*set); !st) return bad(what + st.message());
    out.bundles.push_back(std::move(*set));
    return {};
  };
  if (j.contains("bundles")) {
    const auto& bundles = j["bundles"];
    if (!bundles.is_array() || bundles.empty()) return bad("bundles must be a non-empty list of mappings of amounts");
    for (size_t i = 0; i < bundles.size(); ++i)
      if (auto st = one(bundles[i], "bundle " + std::to_string(i) + ": "); !st) return st;
    if (j.contains("strategy")) {
      auto st = j["strategy"].is_string() ? parse_strategy(j["strategy"].get<std::string>()) : expected<strategy>(errc::invalid_argument, "not a text");
      if (!st) return bad("strategy: " + st.error().message());
      out.strat = *st;
    }
    return std::optional<trial_resources>{std::move(out)};
  }
  if (auto st = one(j, ""); !st) return st;
  return std::optional<trial_resources>{std::move(out)};
}

std::function<expected<config>(const config&)> suggestion_check(const search_space& space) {
  return [space](const config& cfg) { return space.accept(cfg); };
}

std::optional<progress_style> parse_progress_style(const std::string& text) {
  if (text == "auto") return progress_style::automatic;
  if (text == "table") return progress_style::table;
  if (text == "lines") return progress_style::lines;
  if (text == "none") return progress_style::none;
  return std::nullopt;
}

}  // namespace tune
