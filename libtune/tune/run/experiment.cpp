#include "tune/run/experiment.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "tune/core/json_text.hpp"
#include "tune/run/yaml_reader.hpp"

namespace tune {

namespace yaml_reader {

// --- search spaces -------------------------------------------------------------------------

const std::vector<std::string> domain_names{"uniform",    "loguniform", "quniform",   "qloguniform", "randn",
                                            "qrandn",     "randint",    "lograndint", "qrandint",    "qlograndint",
                                            "choice",     "grid_search", "constant"};
// Ray Tune domains libtune does not have: said so, not read as a nested space.
const std::vector<std::string> foreign_domains{"sample_from", "lograndn"};

expected<search_space> space_from(const reader& r, const YAML::Node& n, const std::string& path);

// The numeric domains ({uniform: [lo, hi]}, {randint: [lo, hi]}, ...): nothing when
// `key` is none of them; an error naming the argument that is wrong.
std::optional<expected<domain>> numeric_domain_from(const reader& r, const std::string& key, const YAML::Node& arg,
                                                    const std::string& path) {
  auto is = [&](const char* name) { return key == name; };
  auto domain_or = [](domain d) -> std::optional<expected<domain>> { return expected<domain>(std::move(d)); };
  auto failed = [](const status& st) -> std::optional<expected<domain>> { return expected<domain>(st); };
  if (is("uniform") || is("loguniform")) {
    auto v = r.numbers(arg, path + "." + key, 2, "[low, high], e.g. {" + key + ": [0.001, 0.1]}");
    if (!v) return failed(v.error());
    return domain_or(is("uniform") ? uniform((*v)[0], (*v)[1]) : loguniform((*v)[0], (*v)[1]));
  }
  if (is("quniform") || is("qloguniform")) {
    auto v = r.numbers(arg, path + "." + key, 3, "[low, high, q], e.g. {" + key + ": [0.0, 1.0, 0.1]}");
    if (!v) return failed(v.error());
    return domain_or(is("quniform") ? quniform((*v)[0], (*v)[1], (*v)[2]) : qloguniform((*v)[0], (*v)[1], (*v)[2]));
  }
  if (is("randn") || is("qrandn")) {
    const bool q = is("qrandn");
    auto v = r.numbers(arg, path + "." + key, q ? 3 : 2,
                       q ? "[mean, sd, q], e.g. {qrandn: [10, 2, 0.5]}" : "[mean, sd], e.g. {randn: [10, 2]}");
    if (!v) return failed(v.error());
    return domain_or(q ? qrandn((*v)[0], (*v)[1], (*v)[2]) : randn((*v)[0], (*v)[1]));
  }
  if (is("qrandint") || is("qlograndint")) {
    if (!arg.IsSequence() || arg.size() != 3)
      return failed(r.error(arg, path + "." + key, "give [low, high, q] (high included, as in Ray Tune), e.g. {" + key + ": [8, 64, 8]}"));
    std::int64_t v[3];
    for (std::size_t i = 0; i < 3; ++i) {
      auto x = r.integer(arg[i], path + "." + key + "[" + std::to_string(i) + "]", INT64_MIN);
      if (!x) return failed(x.error());
      v[i] = *x;
    }
    return domain_or(is("qrandint") ? qrandint(v[0], v[1], v[2]) : qlograndint(v[0], v[1], v[2]));
  }
  if (is("randint") || is("lograndint")) {
    if (!arg.IsSequence() || arg.size() != 2)
      return failed(r.error(arg, path + "." + key, "give [low, high] (high excluded, as in Ray Tune), e.g. {" + key + ": [1, 10]}"));
    auto lo = r.integer(arg[0], path + "." + key + "[0]", INT64_MIN), hi = r.integer(arg[1], path + "." + key + "[1]", INT64_MIN);
    if (!lo) return failed(lo.error());
    if (!hi) return failed(hi.error());
    return domain_or(is("randint") ? randint(*lo, *hi) : lograndint(*lo, *hi));
  }
  return std::nullopt;
}

expected<domain> domain_from(const reader& r, const YAML::Node& n, const std::string& path);

// A weighted choice: {choice: [a, b], weights: [3, 1]}.
expected<domain> weighted_choice_from(const reader& r, const YAML::Node& n, const std::string& path) {
  YAML::Node just_choice;
  just_choice["choice"] = n["choice"];
  auto d = domain_from(r, just_choice, path);
  if (!d) return d.error();
  auto w = r.numbers(n["weights"], path + ".weights", n["choice"].size(),
                     "one weight per option, e.g. {choice: [sgd, adam], weights: [3, 1]}");
  if (!w) return w.error();
  domain weighted = choice(d->options(), *w);
  if (!weighted.error()) return r.error(n["weights"], path + ".weights", weighted.error().message());
  return weighted;
}

expected<domain> domain_from(const reader& r, const YAML::Node& n, const std::string& path) {
  if (n.IsMap() && n.size() == 2 && n["choice"] && n["weights"] && n["choice"].IsSequence())
    return weighted_choice_from(r, n, path);
  if (n.IsMap() && n.size() == 1) {
    auto key = n.begin()->first.Scalar();
    const auto& arg = n.begin()->second;
    auto is = [&](const char* name) { return key == name; };
    if (std::find(foreign_domains.begin(), foreign_domains.end(), key) != foreign_domains.end())
      return r.error(n, path, key + " (Ray Tune's tune." + key + ") is not one of libtune's domains: " + listed(domain_names));
    auto made = [&](domain d) -> expected<domain> {
      if (!d.error()) return r.error(n, path, d.error().message());
      return d;
    };
    if (auto d = numeric_domain_from(r, key, arg, path)) {
      if (!*d) return d->error();
      return made(std::move(**d));
    }
    if (is("choice")) {
      if (!arg.IsSequence() || arg.size() == 0)
        return r.error(arg, path + ".choice", "give the options as a list, e.g. {choice: [64, 128, 256]}");
      std::vector<domain> options;
      for (size_t i = 0; i < arg.size(); ++i) {
        auto d = domain_from(r, arg[i], path + ".choice[" + std::to_string(i) + "]");
        if (!d) return d.error();
        options.push_back(std::move(*d));
      }
      return made(choice(std::move(options)));
    }
    if (is("grid_search")) {
      if (!arg.IsSequence() || arg.size() == 0)
        return r.error(arg, path + ".grid_search", "give the values as a list, e.g. {grid_search: [1, 2, 3]}");
      auto v = r.json(arg, path + ".grid_search");
      if (!v) return v.error();
      return made(grid_search(std::vector<nlohmann::json>(v->begin(), v->end())));
    }
    if (is("constant")) {
      auto v = r.json(arg, path + ".constant");
      if (!v) return v.error();
      return domain(*v);
    }
    // A one-key mapping whose key is almost a domain's name: a typo, not a nested space.
    for (auto& d : domain_names)
      if (arg.IsSequence() && edit_distance(key, d) <= 2)
        return r.error(n, path, "'" + key + "' is not a domain (did you mean " + d + "?); a nested parameter named '" + key +
                                    "' holding a list is written {" + key + ": {constant: [...]}}");
  }
  if (n.IsMap()) {
    auto sub = space_from(r, n, path);
    if (!sub) return sub.error();
    return domain(std::move(*sub));
  }
  auto v = r.json(n, path);
  if (!v) return v.error();
  return domain(*v);
}

expected<search_space> space_from(const reader& r, const YAML::Node& n, const std::string& path) {
  if (n.IsNull()) return search_space{};
  if (!n.IsMap()) return r.error(n, path, "give the parameters as a mapping, e.g. {lr: {loguniform: [1.0e-4, 0.1]}}");
  search_space s;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    auto name = it->first.Scalar();
    auto at = path + "." + name;
    if (!seen.insert(name).second) return r.error(it->first, at, "given twice");
    if (name.empty() || name.find_first_of("/.") != std::string::npos)
      return r.error(it->first, at, "a parameter's name has no '/' or '.' (nest a mapping instead)");
    auto d = domain_from(r, it->second, at);
    if (!d) return d.error();
    s.add(name, std::move(*d));
  }
  return s;
}

// --- schedulers and searches -----------------------------------------------------------------

const std::vector<std::string> scheduler_names{"fifo", "asha", "hyperband", "median_stopping", "pbt"};
const std::map<std::string, std::string> scheduler_aliases{{"median", "median_stopping"},
                                                           {"async_hyperband", "asha"},
                                                           {"AsyncHyperBandScheduler", "asha"},
                                                           {"HyperBandScheduler", "hyperband"},
                                                           {"MedianStoppingRule", "median_stopping"},
                                                           {"PopulationBasedTraining", "pbt"},
                                                           {"FIFOScheduler", "fifo"}};

// The type of a scheduler or search (a name, or a mapping's "type"), and its options.
struct typed_node {
  std::string type;
  YAML::Node type_node;
  std::vector<std::pair<std::string, YAML::Node>> options;
  std::vector<YAML::Node> keys;  // each option's key, where errors about it point
};

expected<typed_node> typed(const reader& r, const YAML::Node& n, const std::string& path, const std::vector<std::string>& names,
                           const std::map<std::string, std::string>& aliases, const std::string& example) {
  typed_node out;
  if (n.IsScalar()) {
    out.type = n.Scalar();
    out.type_node = n;
  } else if (n.IsMap()) {
    if (!n["type"]) return r.error(n, path, "say which, with type: (e.g. " + example + ")");
    auto t = r.text(n["type"], path + ".type");
    if (!t) return t.error();
    out.type = *t;
    out.type_node = n["type"];
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      auto key = it->first.Scalar();
      if (!seen.insert(key).second) return r.error(it->first, path + "." + key, "given twice");
      if (key == "type") continue;
      out.options.emplace_back(key, it->second);
      out.keys.push_back(it->first);
    }
  } else {
    return r.error(n, path, "give a name or a mapping with type:, e.g. " + example);
  }
  if (auto a = aliases.find(out.type); a != aliases.end()) out.type = a->second;
  if (std::find(names.begin(), names.end(), out.type) == names.end())
    return r.error(out.type_node, path, "'" + out.type + "' is not one of " + listed(names) + suggestion(out.type, names));
  return out;
}

// Reads each option into its field; an unknown option is an error that lists them.
struct option_table {
  std::vector<std::string> names;
  std::vector<std::function<status(const YAML::Node&, const std::string&)>> readers;
  void add(std::string name, std::function<status(const YAML::Node&, const std::string&)> f) {
    names.push_back(std::move(name));
    readers.push_back(std::move(f));
  }
  status read(const reader& r, const typed_node& t, const std::string& path) const {
    for (size_t i = 0; i < t.options.size(); ++i) {
      auto& [key, value] = t.options[i];
      auto it = std::find(names.begin(), names.end(), key);
      if (it == names.end())
        return r.error(t.keys[i], path + "." + key,
                       "not an option of " + t.type + suggestion(key, names) + "; it has: " + (names.empty() ? "none" : listed(names)));
      if (auto s = readers[static_cast<size_t>(it - names.begin())](value, path + "." + key); !s) return s;
    }
    return status::ok();
  }
};

template <class T>
auto int_field(const reader& r, T& field, int64_t at_least) {
  return [&r, &field, at_least](const YAML::Node& n, const std::string& path) -> status {
    auto v = r.integer(n, path, at_least);
    if (!v) return v.error();
    field = static_cast<T>(*v);
    return status::ok();
  };
}

auto flag_field(const reader& r, bool& field) {
  return [&r, &field](const YAML::Node& n, const std::string& path) -> status {
    auto v = r.flag(n, path);
    if (!v) return v.error();
    field = *v;
    return status::ok();
  };
}

auto real_field(const reader& r, double& field) {
  return [&r, &field](const YAML::Node& n, const std::string& path) -> status {
    auto v = r.number(n, path);
    if (!v) return v.error();
    field = *v;
    return status::ok();
  };
}

// PBT's hyperparam_mutations: {name: {uniform|loguniform: [lo, hi]} | {randint: [lo, hi]} |
// {choice: [...]} | [options...]}.
status read_mutations(const reader& r, const YAML::Node& n, const std::string& path, std::vector<mutation>& out) {
  if (!n.IsMap()) return r.error(n, path, "give a mapping of parameter to range, e.g. {lr: {loguniform: [1.0e-4, 0.1]}}");
  for (auto it = n.begin(); it != n.end(); ++it) {
    mutation m;
    m.key = it->first.Scalar();
    auto at = path + "." + m.key;
    const auto& v = it->second;
    if (v.IsSequence()) {
      auto opts = r.json(v, at);
      if (!opts) return opts.error();
      m.options.assign(opts->begin(), opts->end());
    } else if (v.IsMap() && v.size() == 1) {
      auto kind = v.begin()->first.Scalar();
      const auto& arg = v.begin()->second;
      if (kind == "choice") {
        auto opts = r.json(arg, at + ".choice");
        if (!opts) return opts.error();
        if (!opts->is_array()) return r.error(arg, at + ".choice", "give the options as a list");
        m.options.assign(opts->begin(), opts->end());
      } else if (kind == "uniform" || kind == "loguniform" || kind == "randint") {
        auto lohi = r.numbers(arg, at + "." + kind, 2, "[low, high]");
        if (!lohi) return lohi.error();
        m.low = (*lohi)[0];
        m.high = (*lohi)[1];
        m.log = kind == "loguniform";
        m.integer = kind == "randint";
      } else if (kind == "function") {
        // A function of the Python driver's (Ray's lambda in hyperparam_mutations): it
        // draws the resamples (docs/hooks.md).
        auto f = r.flag(arg, at + ".function");
        if (!f) return f.error();
        if (!*f) return r.error(arg, at + ".function", "write function: true (the driver's function draws it), or a range");
        m.by_hooks = true;
      } else {
        return r.error(v, at, "give {uniform: [lo, hi]}, {loguniform: [lo, hi]}, {randint: [lo, hi]}, {choice: [...]} or a list");
      }
    } else {
      return r.error(v, at, "give {uniform: [lo, hi]}, {loguniform: [lo, hi]}, {randint: [lo, hi]}, {choice: [...]} or a list");
    }
    out.push_back(std::move(m));
  }
  return status::ok();
}

expected<scheduler_spec> scheduler_from(const reader& r, const YAML::Node& n, const std::string& path) {
  auto t = typed(r, n, path, scheduler_names, scheduler_aliases, "{type: asha, max_t: 8}");
  if (!t) return t.error();
  option_table opts;
  scheduler_spec out;
  if (t->type == "fifo") {
    out = fifo{};
    if (auto s = opts.read(r, *t, path); !s) return s;
  } else if (t->type == "asha") {
    asha a;
    opts.add("max_t", int_field(r, a.max_t, 1));
    opts.add("grace_period", int_field(r, a.grace_period, 1));
    opts.add("reduction_factor", int_field(r, a.reduction_factor, 2));
    opts.add("brackets", int_field(r, a.brackets, 1));
    if (auto s = opts.read(r, *t, path); !s) return s;
    out = a;
  } else if (t->type == "hyperband") {
    hyperband h;
    opts.add("max_t", int_field(r, h.max_t, 1));
    opts.add("reduction_factor", int_field(r, h.reduction_factor, 2));
    opts.add("brackets", int_field(r, h.brackets, 0));
    if (auto s = opts.read(r, *t, path); !s) return s;
    out = h;
  } else if (t->type == "median_stopping") {
    median_stopping m;
    opts.add("grace_period", int_field(r, m.grace_period, 0));
    opts.add("min_samples_required", int_field(r, m.min_samples_required, 1));
    if (auto s = opts.read(r, *t, path); !s) return s;
    out = m;
  } else {
    pbt p;
    opts.add("perturbation_interval", int_field(r, p.perturbation_interval, 1));
    opts.add("burn_in_period", int_field(r, p.burn_in_period, 0));
    opts.add("quantile_fraction", real_field(r, p.quantile_fraction));
    opts.add("resample_probability", real_field(r, p.resample_probability));
    opts.add("perturbation_factors", [&](const YAML::Node& v, const std::string& at) -> status {
      auto f = r.numbers(v, at, 0, "a list of factors, e.g. [1.2, 0.8]");
      if (!f) return f.error();
      p.perturbation_factors = *f;
      return status::ok();
    });
    opts.add("hyperparam_mutations", [&](const YAML::Node& v, const std::string& at) {
      return read_mutations(r, v, at, p.hyperparameter_mutations);
    });
    opts.add("seed", int_field(r, p.seed, 0));
    opts.add("custom_explore", [&](const YAML::Node& v, const std::string& at) -> status {
      auto f = r.flag(v, at);
      if (!f) return f.error();
      p.explore_by_hooks = *f;  // the Python driver's custom_explore_fn
      return status::ok();
    });
    if (auto s = opts.read(r, *t, path); !s) return s;
    out = p;
  }
  // The scheduler's own checks (ranges, combinations), at the place it was written.
  if (auto made = make_scheduler(out, "metric", mode::max); !made) return r.error(n, path, made.error().message());
  return out;
}

// metrics: {acc: max, latency_ms: min}, in the order written (the first is the metric).
expected<std::vector<objective>> objectives_from(const reader& r, const YAML::Node& n, const std::string& path) {
  if (!n.IsMap() || n.size() == 0)
    return r.error(n, path, "give each objective and its direction, e.g. {acc: max, latency_ms: min}");
  std::vector<objective> out;
  for (auto it = n.begin(); it != n.end(); ++it) {
    auto name = it->first.Scalar();
    auto d = r.one_of(it->second, path + "." + name, {"max", "min"});
    if (!d) return d.error();
    for (const auto& o : out)
      if (o.name == name) return r.error(it->first, path + "." + name, "given twice");
    out.push_back({name, *d == "max" ? mode::max : mode::min});
  }
  return out;
}

// constraints: [mem_over, ms_over]: metrics that must be <= 0.
expected<std::vector<std::string>> names_from(const reader& r, const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence())
    return r.error(n, path, "give the metrics that must be <= 0 as a list, e.g. [memory_over_gib]");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto t = r.text(n[i], path + "[" + std::to_string(i) + "]");
    if (!t) return t.error();
    if (t->empty()) return r.error(n[i], path + "[" + std::to_string(i) + "]", "give a metric's name");
    out.push_back(*t);
  }
  return out;
}

// A model-based search's own options (TPE, the GP, BOHB), after the ones they share.
template <class Spec>
expected<search_spec> model_search_from(const reader& r, const typed_node& t, const std::string& path, option_table& opts,
                                        std::vector<config>& points) {  // filled by opts.read
  Spec o;
  if constexpr (std::is_same_v<Spec, gp_search>) {
    opts.add("n_startup_trials", int_field(r, o.n_startup_trials, 1));
    opts.add("n_candidates", int_field(r, o.n_candidates, 1));
    opts.add("n_local", int_field(r, o.n_local, 0));
    opts.add("fantasize_pending", flag_field(r, o.fantasize_pending));
    opts.add("max_fit_trials", int_field(r, o.max_fit_trials, 4));
  } else if constexpr (std::is_same_v<Spec, bohb_search>) {
    opts.add("random_fraction", real_field(r, o.random_fraction));
    opts.add("min_points_in_model", int_field(r, o.min_points_in_model, 0));
    opts.add("gamma", real_field(r, o.gamma));
    opts.add("n_ei_candidates", int_field(r, o.n_ei_candidates, 1));
  } else {
    opts.add("n_startup_trials", int_field(r, o.n_startup_trials, 1));
    opts.add("n_ei_candidates", int_field(r, o.n_ei_candidates, 1));
    opts.add("gamma", real_field(r, o.gamma));
    opts.add("max_below", int_field(r, o.max_below, 1));
    opts.add("prior_weight", real_field(r, o.prior_weight));
    opts.add("multivariate", [&](const YAML::Node& v, const std::string& at) -> status {
      auto f = r.flag(v, at);
      if (!f) return f.error();
      o.multivariate = *f;
      return status::ok();
    });
    opts.add("constant_liar", flag_field(r, o.constant_liar));
  }
  if (auto s = opts.read(r, t, path); !s) return s;
  o.points_to_evaluate = std::move(points);
  return search_spec{o};
}

expected<search_spec> search_from(const reader& r, const YAML::Node& n, const std::string& path) {
  auto t = typed(r, n, path, {"random", "grid", "tpe", "gp", "bohb"},
                 {{"TPESampler", "tpe"}, {"hyperopt", "tpe"}, {"grid_search", "grid"}, {"GPSampler", "gp"},
                  {"bayesopt", "gp"}, {"BayesOptSearch", "gp"}, {"TuneBOHB", "bohb"}},
                 "{type: tpe, n_startup_trials: 10}");
  if (!t) return t.error();
  option_table opts;
  std::vector<config> points;
  opts.add("points_to_evaluate", [&](const YAML::Node& v, const std::string& at) -> status {
    auto j = r.json(v, at);
    if (!j) return j.error();
    if (!j->is_array()) return r.error(v, at, "give a list of configs, e.g. [{lr: 0.01, batch: 64}]");
    for (std::size_t i = 0; i < j->size(); ++i)
      if (!(*j)[i].is_object())
        return r.error(v[i], at + "[" + std::to_string(i) + "]", "give a config: a mapping of parameter names to values");
    points.assign(j->begin(), j->end());
    return status::ok();
  });
  if (t->type == "random") {
    if (auto s = opts.read(r, *t, path); !s) return s;
    return search_spec{random_search_alg{std::move(points)}};
  }
  if (t->type == "grid") {
    if (auto s = opts.read(r, *t, path); !s) return s;
    return search_spec{grid_search_alg{}};
  }
  if (t->type == "gp") return model_search_from<gp_search>(r, *t, path, opts, points);
  if (t->type == "bohb") return model_search_from<bohb_search>(r, *t, path, opts, points);
  return model_search_from<tpe_search>(r, *t, path, opts, points);
}

template <class T, class F>
expected<T> read_part(const std::string& text, const std::string& source, F&& f) {
  auto n = load(text, source);
  if (!n) return n.error();
  reader r{source};
  return f(r, *n, std::string{});
}

expected<resources> resources_from(const reader& r, const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) return r.error(n, path, "give the amounts as a mapping, e.g. {gpu: 0.25, cpu: 1}");
  auto j = r.json(n, path);
  if (!j) return j.error();
  // gpu: auto (auto-packing, for resources_per_trial): the share is measured.
  bool gpu_auto = j->contains("gpu") && (*j)["gpu"] == "auto";
  if (gpu_auto) {
    if (path != "resources_per_trial")
      return r.error(n, path, "gpu: auto is for resources_per_trial (one bundle), not bundles");
    j->erase("gpu");
    if (j->empty()) {
      resources out{resource_set{}};
      out.gpu_auto = true;
      return out;
    }
  }
  auto set = resource_set::from_json(json_text(*j));
  if (!set) return r.error(n, path, set.error().message());
  if (!gpu_auto)
    if (auto s = check_request(*set); !s) return r.error(n, path, s.message());
  resources out{*set};
  out.gpu_auto = gpu_auto;
  return out;
}

}  // namespace yaml_reader

using namespace yaml_reader;

expected<search_space> read_search_space(const std::string& text, const std::string& source) {
  return read_part<search_space>(text, source, [](const reader& r, const YAML::Node& n, const std::string&) {
    return space_from(r, n, "space");
  });
}

expected<scheduler_spec> read_scheduler(const std::string& text, const std::string& source) {
  return read_part<scheduler_spec>(text, source, [](const reader& r, const YAML::Node& n, const std::string&) {
    return scheduler_from(r, n, "scheduler");
  });
}

expected<search_spec> read_search(const std::string& text, const std::string& source) {
  return read_part<search_spec>(text, source, [](const reader& r, const YAML::Node& n, const std::string&) {
    return search_from(r, n, "search");
  });
}

expected<experiment_spec> read_experiment_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return status{errc::not_found, "no experiment file " + path};
  if (fs::is_directory(path, ec)) return status{errc::invalid_argument, path + " is a folder, not an experiment file"};
  std::ifstream in(path);
  if (!in) return status{errc::invalid_argument, "cannot read " + path + ": " + std::strerror(errno)};
  std::string text{std::istreambuf_iterator<char>(in), {}};
  auto base = fs::absolute(path, ec).parent_path().string();
  return read_experiment(text, path, base);
}

}  // namespace tune
