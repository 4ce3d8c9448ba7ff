// The keys of an experiment file, one table: each row is a key's name, the type of its
// value, its default, its help, and how it is read and checked (each error naming the
// file, line and column). read_experiment walks the file's keys through it; `tune run
// --keys` and docs/run.md's table are rendered from it (experiment_keys_test checks
// that the docs hold the table as it is rendered, and that each default is the code's).
#include <functional>
#include <map>
#include <regex>

#include "tune/core/quantity.hpp"
#include "tune/run/experiment.hpp"
#include "tune/run/yaml_reader.hpp"
#include "tune/trial/output_metrics.hpp"

namespace tune {

namespace {

using namespace yaml_reader;

// What a key's reader gets: the file's reader, the key, where relative paths start, and
// the experiment it fills.
struct key_input {
  const reader& r;
  const std::string& key;
  const std::string& base_dir;
  experiment_spec& out;
};
using key_reader = std::function<status(const key_input&, const YAML::Node&)>;

struct key_row {
  experiment_key about;
  key_reader read;
};

// A default as the docs show it: a value of the file, or words.
struct shown_default {
  std::string value, note;
};
shown_default value(std::string v) { return {std::move(v), ""}; }
shown_default note(std::string n) { return {"", std::move(n)}; }

key_row row(std::string name, std::string type, shown_default d, std::string help, key_reader read) {
  return {{std::move(name), std::move(type), std::move(d.value), std::move(d.note), std::move(help)}, std::move(read)};
}

template <class T>
T& field_of(experiment_spec& e, T tune_config::*f) {
  return e.config.*f;
}
template <class T>
T& field_of(experiment_spec& e, T program::*f) {
  return e.prog.*f;
}

// --- the kinds of values -------------------------------------------------------------

template <class F>
key_row whole(std::string name, F field, int64_t least, shown_default d, std::string help) {
  return row(std::move(name), "whole number >= " + std::to_string(least), std::move(d), std::move(help),
             [field, least](const key_input& in, const YAML::Node& v) -> status {
               auto n = in.r.integer(v, in.key, least);
               if (!n) return n.error();
               auto& f = field_of(in.out, field);
               f = static_cast<std::remove_reference_t<decltype(f)>>(*n);
               return status::ok();
             });
}

template <class F>
key_row flag(std::string name, F field, shown_default d, std::string help) {
  return row(std::move(name), "true or false", std::move(d), std::move(help),
             [field](const key_input& in, const YAML::Node& v) -> status {
               auto b = in.r.flag(v, in.key);
               if (!b) return b.error();
               field_of(in.out, field) = *b;
               return status::ok();
             });
}

// Seconds: above 0, or 0 and more.
key_row seconds(std::string name, double tune_config::*field, bool above_zero, shown_default d, std::string help) {
  return row(std::move(name), above_zero ? "seconds > 0" : "seconds >= 0", std::move(d), std::move(help),
             [field, above_zero](const key_input& in, const YAML::Node& v) -> status {
               auto x = in.r.number(v, in.key);
               if (!x) return x.error();
               if (*x < 0 || (above_zero && *x == 0))
                 return in.r.error(v, in.key, above_zero ? "give a time above 0" : "give a time of 0 or more");
               in.out.config.*field = *x;
               return status::ok();
             });
}

// One of `options`, given to `set`.
key_row one_of(std::string name, std::vector<std::string> options, shown_default d, std::string help,
               std::function<void(experiment_spec&, const std::string&)> set) {
  std::string type;
  for (size_t i = 0; i < options.size(); ++i)
    type += (i == 0 ? "" : i + 1 == options.size() ? " or " : ", ") + ("`" + options[i] + "`");
  return row(std::move(name), type, std::move(d), std::move(help),
             [options, set](const key_input& in, const YAML::Node& v) -> status {
               auto t = in.r.one_of(v, in.key, options);
               if (!t) return t.error();
               set(in.out, *t);
               return status::ok();
             });
}

// A value read by `read` (a part of the experiment: its space, scheduler, ...) into `field`.
template <class T, class F>
key_reader into(F field, expected<T> (*read)(const reader&, const YAML::Node&, const std::string&)) {
  return [field, read](const key_input& in, const YAML::Node& v) -> status {
    auto got = read(in.r, v, in.key);
    if (!got) return got.error();
    field_of(in.out, field) = std::move(*got);
    return status::ok();
  };
}

// --- keys read their own way ---------------------------------------------------------------

status read_name(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  if (!t) return t.error();
  if (t->empty() || t->find('/') != std::string::npos) return in.r.error(v, in.key, "give a name without '/'");
  in.out.config.name = *t;
  return status::ok();
}

status read_command(const key_input& in, const YAML::Node& v) {
  if (v.IsScalar())
    return in.r.error(v, in.key, "give the command as a list, e.g. [python3, train.py, --epochs, \"8\"]: libtune runs no shell, "
                                 "so a command line in one text would not be split into arguments");
  if (!v.IsSequence() || v.size() == 0)
    return in.r.error(v, in.key, "give the command as a non-empty list, e.g. [python3, train.py]");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsScalar()) return in.r.error(v[i], in.key + "[" + std::to_string(i) + "]", "each argument is a text");
    in.out.prog.command.push_back(v[i].Scalar());
  }
  return status::ok();
}

status read_working_dir(const key_input& in, const YAML::Node& v) {
  auto& p = in.out.prog;
  if (v.IsNull()) {
    p.working_dir.clear();  // nothing shipped
    return status::ok();
  }
  auto t = in.r.text(v, in.key);
  if (!t) return t.error();
  p.working_dir = t->empty() ? "" : from_base(in.base_dir, *t).string();
  return status::ok();
}

status read_working_dir_limit(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  auto b = t ? parse_bytes(*t, in.key) : expected<int64_t>{t.error()};
  if (!b || *b <= 0) return in.r.error(v, in.key, "give a size, e.g. 200MiB or 1GiB");
  in.out.prog.working_dir_limit = static_cast<uint64_t>(*b);
  return status::ok();
}

// env: NAME: VALUE, or NAME with no value: this process's value; or a list of NAME=VALUE / NAME.
status read_env(const key_input& in, const YAML::Node& v) {
  auto& p = in.out.prog;
  auto add = [&](const std::string& name, const YAML::Node* value, const YAML::Node& at) {
    if (auto ok = check_env_name(name); !ok) return in.r.error(at, "env." + name, ok.message());
    if (!value || value->IsNull()) p.forward_env.push_back(name);
    else if (!value->IsScalar()) return in.r.error(*value, "env." + name, "give a text");
    else p.env[name] = value->Scalar();
    return status::ok();
  };
  if (v.IsMap()) {
    for (auto e = v.begin(); e != v.end(); ++e)
      if (auto s = add(e->first.Scalar(), &e->second, e->first); !s) return s;
    return status::ok();
  }
  if (v.IsSequence()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].IsScalar()) return in.r.error(v[i], in.key, "each entry is NAME=VALUE or NAME");
      auto item = v[i].Scalar();
      auto eq = item.find('=');
      YAML::Node value(item.substr(eq == std::string::npos ? item.size() : eq + 1));
      if (auto s = add(item.substr(0, eq), eq == std::string::npos ? nullptr : &value, v[i]); !s) return s;
    }
    return status::ok();
  }
  if (v.IsNull()) return status::ok();
  return in.r.error(v, in.key, "give a mapping (NAME: VALUE, or NAME: with no value to take this process's), or a list of NAME=VALUE");
}

status read_metric_pattern(const key_input& in, const YAML::Node& v) {
  auto& patterns = in.out.prog.metric_patterns;
  if (v.IsScalar()) {
    patterns = {v.Scalar()};
  } else if (v.IsSequence()) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].IsScalar()) return in.r.error(v[i], in.key, "each pattern is a text");
      patterns.push_back(v[i].Scalar());
    }
  } else {
    return in.r.error(v, in.key, "give a pattern (e.g. 'val_acc=(\\S+)') or a list of them");
  }
  for (const auto& pattern : patterns)  // compiled here: errors point at the file
    if (auto m = output_metrics::make({pattern}, "metric"); !m) return in.r.error(v, in.key, m.error().message());
  return status::ok();
}

status read_metric(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  if (!t) return t.error();
  if (t->empty()) return in.r.error(v, in.key, "give the name of the metric the trials report");
  in.out.config.metric = *t;
  return status::ok();
}

status read_bundles(const key_input& in, const YAML::Node& v) {
  if (!v.IsSequence() || v.size() == 0) return in.r.error(v, in.key, "give a list of bundles, e.g. [{gpu: 1}, {cpu: 4}]");
  for (size_t i = 0; i < v.size(); ++i) {
    auto b = resources_from(in.r, v[i], in.key + "[" + std::to_string(i) + "]");
    if (!b) return b.error();
    in.out.config.bundles.push_back(*b);
  }
  return status::ok();
}

// workers: {count: 4, resources: {gpu: 1, cpu: 4}, join_timeout_s: 600} (docs/workers.md).
status read_workers(const key_input& in, const YAML::Node& v) {
  if (!v.IsMap() || !v["count"])
    return in.r.error(v, in.key, "give a mapping with the count, e.g. {count: 4, resources: {gpu: 1, cpu: 4}}");
  if (auto s = known_keys(in.r, v, in.key, {"count", "resources", "join_timeout_s"}, {}); !s) return s;
  worker_group w;
  auto n = in.r.integer(v["count"], in.key + ".count", 1);
  if (!n) return n.error();
  w.count = static_cast<int>(*n);
  if (v["resources"]) {
    auto b = resources_from(in.r, v["resources"], in.key + ".resources");
    if (!b) return b.error();
    w.per_worker = *b;
  }
  if (v["join_timeout_s"]) {
    auto x = in.r.number(v["join_timeout_s"], in.key + ".join_timeout_s");
    if (!x) return x.error();
    if (*x < 0) return in.r.error(v["join_timeout_s"], in.key + ".join_timeout_s", "give 0 (no limit) or seconds");
    w.join_timeout_s = *x;
  }
  in.out.config.workers = w;
  return status::ok();
}

status read_strategy(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  auto st = t ? parse_strategy(*t) : expected<strategy>{t.error()};
  if (!st) return in.r.error(v, in.key, "give pack, spread, strict_pack or strict_spread");
  in.out.config.strategy = *st;
  return status::ok();
}

status read_stop(const key_input& in, const YAML::Node& v) {
  if (!v.IsMap()) return in.r.error(v, in.key, "give a mapping, e.g. {max_iterations: 20, metric_threshold: 0.95}");
  if (auto s = known_keys(in.r, v, in.key, {"max_iterations", "metric_threshold", "max_time_s", "at_least"},
                          {{"training_iteration", "max_iterations"}});
      !s)
    return s;
  auto& stop = in.out.config.stop;
  for (auto e = v.begin(); e != v.end(); ++e) {
    auto k = e->first.Scalar();
    if (k == "at_least") {  // Ray's stop={"metric": value}: a trial stops once it reports metric >= value
      if (!e->second.IsMap()) return in.r.error(e->second, "stop.at_least", "give a mapping of metric to value, e.g. {mean_accuracy: 0.98}");
      for (auto m = e->second.begin(); m != e->second.end(); ++m) {
        auto x = in.r.number(m->second, "stop.at_least." + m->first.Scalar());
        if (!x) return x.error();
        in.out.config.stoppers.push_back(metric_at_least{m->first.Scalar(), *x});
      }
      continue;
    }
    if (k == "max_iterations") {
      auto n = in.r.integer(e->second, "stop." + k, 1);
      if (!n) return n.error();
      stop.max_iterations = *n;
      continue;
    }
    auto x = in.r.number(e->second, "stop." + k);
    if (!x) return x.error();
    if (k == "max_time_s" && !(*x > 0)) return in.r.error(e->second, "stop." + k, "give a time above 0");
    (k == "max_time_s" ? stop.max_time_s : stop.metric_threshold) = *x;
  }
  return status::ok();
}

// stoppers: libtune's own (Ray's built-in stoppers), each {type: ..., options}.
expected<stopper_spec> stopper_from(const reader& r, const YAML::Node& n, const std::string& at) {
  if (!n.IsMap() || !n["type"])
    return r.error(n, at, "give {type: maximum_iteration | trial_plateau | experiment_plateau | timeout, ...options}");
  auto type = r.one_of(n["type"], at + ".type", {"maximum_iteration", "trial_plateau", "experiment_plateau", "timeout"});
  if (!type) return type.error();
  auto number = [&](const char* k, double& field) -> status {
    if (!n[k]) return status::ok();
    auto x = r.number(n[k], at + "." + k);
    if (!x) return x.error();
    field = *x;
    return status::ok();
  };
  auto whole_of = [&](const char* k, int64_t& field, int64_t least) -> status {
    if (!n[k]) return status::ok();
    auto x = r.integer(n[k], at + "." + k, least);
    if (!x) return x.error();
    field = *x;
    return status::ok();
  };
  auto text_of = [&](const char* k, std::string& field) -> status {
    if (!n[k]) return r.error(n, at, std::string{"say which metric ("} + k + ")");
    auto t = r.text(n[k], at + "." + k);
    if (!t) return t.error();
    field = *t;
    return status::ok();
  };
  auto mode_of = [&](const char* k, std::optional<mode>& field) -> status {
    if (!n[k]) return status::ok();
    auto t = r.one_of(n[k], at + "." + k, {"min", "max"});
    if (!t) return t.error();
    field = *t == "max" ? mode::max : mode::min;
    return status::ok();
  };
  stopper_spec out;
  status st;
  std::vector<std::string> keys{"type"};
  if (*type == "maximum_iteration") {
    maximum_iteration_stopper m;
    keys.insert(keys.end(), {"max_iter"});
    st = whole_of("max_iter", m.max_iter, 1);
    out = m;
  } else if (*type == "trial_plateau") {
    trial_plateau_stopper t;
    keys.insert(keys.end(), {"metric", "std", "num_results", "grace_period", "metric_threshold", "mode"});
    double threshold = 0;
    if (!(st = text_of("metric", t.metric)) || !(st = number("std", t.std)) || !(st = whole_of("num_results", t.num_results, 1)) ||
        !(st = whole_of("grace_period", t.grace_period, 0)) || !(st = number("metric_threshold", threshold)) ||
        !(st = mode_of("mode", t.mode)))
      return st;
    if (n["metric_threshold"]) t.metric_threshold = threshold;
    out = t;
  } else if (*type == "experiment_plateau") {
    experiment_plateau_stopper e;
    keys.insert(keys.end(), {"metric", "std", "top", "mode", "patience"});
    std::optional<mode> m;
    if (!(st = text_of("metric", e.metric)) || !(st = number("std", e.std)) || !(st = whole_of("top", e.top, 2)) ||
        !(st = mode_of("mode", m)) || !(st = whole_of("patience", e.patience, 0)))
      return st;
    if (m) e.mode = *m;
    out = e;
  } else {
    timeout_stopper t;
    keys.insert(keys.end(), {"timeout_s"});
    if (!n["timeout_s"]) return r.error(n, at, "give timeout_s (seconds)");
    st = number("timeout_s", t.timeout_s);
    out = t;
  }
  if (!st) return st;
  if (auto s = known_keys(r, n, at, keys, {}); !s) return s;
  if (auto s = check_stopper(out); !s) return r.error(n, at, s.message());
  return out;
}

status read_stoppers(const key_input& in, const YAML::Node& v) {
  if (!v.IsSequence()) return in.r.error(v, in.key, "give a list, e.g. [{type: trial_plateau, metric: loss}]");
  for (size_t i = 0; i < v.size(); ++i) {
    auto s = stopper_from(in.r, v[i], in.key + "[" + std::to_string(i) + "]");
    if (!s) return s.error();
    in.out.config.stoppers.push_back(std::move(*s));
  }
  return status::ok();
}

status read_checkpoints(const key_input& in, const YAML::Node& v) {
  if (!v.IsMap()) return in.r.error(v, in.key, "give a mapping, e.g. {num_to_keep: 2, score_attribute: acc, score_order: max}");
  if (auto s = known_keys(in.r, v, in.key, {"num_to_keep", "score_attribute", "score_order"}, {}); !s) return s;
  auto& c = in.out.config.checkpoints;
  if (v["num_to_keep"]) {
    auto n = in.r.integer(v["num_to_keep"], in.key + ".num_to_keep", 0);
    if (!n) return n.error();
    c.num_to_keep = static_cast<int>(*n);
  }
  if (v["score_attribute"]) {
    auto t = in.r.text(v["score_attribute"], in.key + ".score_attribute");
    if (!t) return t.error();
    c.score_attribute = *t;
  }
  if (v["score_order"]) {
    auto t = in.r.one_of(v["score_order"], in.key + ".score_order", {"max", "min"});
    if (!t) return t.error();
    c.score_order = *t == "max" ? mode::max : mode::min;
  }
  if (!c.score_attribute.empty() && c.num_to_keep == 0)
    return in.r.error(v, in.key, "score_attribute chooses which checkpoints num_to_keep keeps: give num_to_keep too");
  return status::ok();
}

// driver: what the Python driver that runs this experiment serves (written by libtune's
// Python API; docs/hooks.md).
status read_driver(const key_input& in, const YAML::Node& v) {
  if (!v.IsMap()) return in.r.error(v, in.key, "give a mapping (libtune's Python API writes it)");
  if (auto s = known_keys(in.r, v, in.key, {"results", "trials", "searcher", "scheduler", "prepare", "explore", "timeout_s"}, {}); !s)
    return s;
  auto& d = in.out.config.driver;
  for (auto [k, field] : {std::pair{"results", &d.serves.results}, {"trials", &d.serves.trials},
                          {"prepare", &d.serves.prepares}, {"explore", &d.serves.explores}}) {
    if (!v[k]) continue;
    auto b = in.r.flag(v[k], in.key + "." + k);
    if (!b) return b.error();
    *field = *b;
  }
  for (auto [k, field] : {std::pair{"searcher", &d.searcher}, {"scheduler", &d.scheduler}}) {
    if (!v[k]) continue;
    auto t = in.r.text(v[k], in.key + "." + k);
    if (!t || t->empty()) return in.r.error(v[k], in.key + "." + k, "give its name");
    *field = *t;
  }
  d.serves.suggests = !d.searcher.empty();
  d.serves.schedules = !d.scheduler.empty();
  if (v["timeout_s"]) {
    auto x = in.r.number(v["timeout_s"], in.key + ".timeout_s");
    if (!x || !(*x > 0)) return in.r.error(v["timeout_s"], in.key + ".timeout_s", "give seconds above 0");
    d.timeout_s = *x;
  }
  return status::ok();
}

status read_time_budget(const key_input& in, const YAML::Node& v) {
  auto x = in.r.number(v, in.key);
  if (!x) return x.error();
  if (!(*x > 0)) return in.r.error(v, in.key, "give a time above 0 (seconds)");
  in.out.config.time_budget_s = *x;
  return status::ok();
}

status read_experiment_dir(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  if (!t || t->empty()) return in.r.error(v, in.key, "give a folder");
  in.out.config.experiment_dir = from_base(in.base_dir, *t).string();
  return status::ok();
}

status read_auto_packing(const key_input& in, const YAML::Node& v) {
  if (!v.IsMap()) return in.r.error(v, in.key, "give a mapping, e.g. {margin: 0.25, min_share: 0.0625}");
  if (auto s = known_keys(in.r, v, in.key, {"margin", "probe_share", "probe_trials", "probe_results", "min_share"}, {}); !s)
    return s;
  auto& o = in.out.config.auto_packing;
  for (auto e = v.begin(); e != v.end(); ++e) {
    auto k = e->first.Scalar();
    if (k == "probe_trials" || k == "probe_results") {
      auto n = in.r.integer(e->second, in.key + "." + k, 1);
      if (!n) return n.error();
      (k == "probe_trials" ? o.probe_trials : o.probe_results) = static_cast<int>(*n);
      continue;
    }
    auto x = in.r.number(e->second, in.key + "." + k);
    if (!x) return x.error();
    (k == "margin" ? o.margin : k == "probe_share" ? o.probe_share : o.min_share) = *x;
  }
  if (auto ok = check(o); !ok) return in.r.error(v, in.key, ok.message().substr(std::string{"auto_packing: "}.size()));
  return status::ok();
}

// mlflow: / wandb: a mapping of the tracker's options, or true for its defaults.
key_reader tracker_reader(nlohmann::json tune_config::*field) {
  return [field](const key_input& in, const YAML::Node& v) -> status {
    auto j = in.r.json(v, in.key);
    if (!j) return j.error();
    if (j->is_boolean()) *j = *j == true ? nlohmann::json::object() : nlohmann::json();
    if (auto s = check_tracker(in.key, *j); !s) return in.r.error(v, in.key, s.message().substr(in.key.size() + 2));
    in.out.config.*field = std::move(*j);
    return status::ok();
  };
}

status read_tracker_python(const key_input& in, const YAML::Node& v) {
  auto t = in.r.text(v, in.key);
  if (!t) return t.error();
  if (t->empty()) return in.r.error(v, in.key, "give the Python that has mlflow or wandb installed");
  in.out.config.tracker_python = *t;
  return status::ok();
}

// --- the table -----------------------------------------------------------------------------

// In the order errors list them. Data, built once: what a row reads into is named by its
// builder (whole, flag, seconds, one_of, into) or its own function above.
const std::vector<key_row> key_table{
    row("name", "text without `/`", note("the file's name (`experiment.yaml`: `experiment`), else the script's"),
        "the experiment's name", read_name),
    row("command", "list of texts", note("required (or `-- COMMAND`)"),
        "the trial's argv: `[python3, train.py, --lr, \"${lr}\"]` ([programs.md](programs.md): placeholders, the "
        "program's lookup)",
        read_command),
    row("working_dir", "folder, or `null`", note("the folder `tune run` runs in"),
        "the folder shipped to every node that runs a trial; `null`: none (the trial runs in its own folder)",
        read_working_dir),
    row("working_dir_limit", "size", value("100MiB"), "largest folder shipped: `100MiB`, `1GiB`, ...",
        read_working_dir_limit),
    row("env", "mapping, or list of texts", note("none"),
        "`{NAME: VALUE}` added to the trials' environment; `NAME:` with no value takes `tune run`'s own value; or a "
        "list of `NAME=VALUE` / `NAME`",
        read_env),
    one_of("config_args", {"none", "append"}, value("none"),
           "`append`: the configuration as `--key value` arguments after the command",
           [](experiment_spec& e, const std::string& t) {
             e.prog.args = t == "append" ? config_args::append : config_args::none;
           }),
    row("metric_pattern", "text, or list of texts", note("none"),
        "an RE2 pattern (or a list) read from the program's standard output lines", read_metric_pattern),
    row("space", "mapping", note("empty"), "the search space (below)",
        [](const key_input& in, const YAML::Node& v) -> status {
          auto s = space_from(in.r, v, "space");
          if (!s) return s.error();
          in.out.space = std::move(*s);
          return status::ok();
        }),
    row("metric", "text", note("required (or `metrics`)"), "the reported metric to tune", read_metric),
    one_of("mode", {"max", "min"}, value("max"), "whether a higher or a lower metric is better",
           [](experiment_spec& e, const std::string& t) { e.config.mode = t == "max" ? mode::max : mode::min; }),
    row("metrics", "mapping", note("none"),
        "several objectives, in order: `{acc: max, latency_ms: min}` (the first is the metric); the last line's JSON "
        "then has `pareto_front: [{trial, values, config}]`",
        into(&tune_config::metrics, objectives_from)),
    row("constraints", "list of texts", note("none"),
        "metrics that must be <= 0: `[memory_over_gib]` (TPE avoids where they are not met; infeasible trials are "
        "never best)",
        into(&tune_config::constraints, names_from)),
    whole("num_samples", &tune_config::num_samples, 1, value("1"), "trials (times the grid's points)"),
    row("resources_per_trial", "mapping", value("{cpu: 1}"),
        "`{gpu: 0.25, cpu: 1, memory: 4GiB, gpu_memory: 8GiB, <custom>: n}`; `gpu: auto`: the share measured "
        "([auto_packing.md](auto_packing.md))",
        into(&tune_config::resources_per_trial, resources_from)),
    row("bundles", "list of mappings", note("none"),
        "several bundles per trial, each as `resources_per_trial` (then not `resources_per_trial`)", read_bundles),
    row("workers", "mapping", note("none"),
        "several worker processes per trial, a bundle each, with PyTorch's rendezvous: `{count: 4, resources: "
        "{gpu: 1, cpu: 4}, join_timeout_s: 600}` (then neither `resources_per_trial` nor `bundles`; "
        "[workers.md](workers.md))",
        read_workers),
    row("strategy", "`pack`, `spread`, `strict_pack` or `strict_spread`", value("pack"),
        "how a trial's bundles (or workers) are placed", read_strategy),
    row("scheduler", "name, or mapping", value("fifo"),
        "`fifo`, `asha`, `hyperband`, `median_stopping`, `pbt`, or `{type: asha, max_t: 8, ...}`",
        into(&tune_config::scheduler, scheduler_from)),
    row("search", "name, or mapping", value("random"),
        "`random`, `grid`, `tpe`, `gp`, `bohb`, `{type: bohb, random_fraction: 0.33, min_points_in_model: 0, gamma: "
        "0.15, n_ei_candidates: 64}` (with `scheduler: hyperband`), `{type: gp, n_startup_trials: 10, n_candidates: "
        "2000, n_local: 5, fantasize_pending: true, max_fit_trials: 400, points_to_evaluate: [...]}`, or `{type: tpe, "
        "n_startup_trials: 10, n_ei_candidates: 24, gamma: 0.1, max_below: 25, prior_weight: 1.0, multivariate: true, "
        "constant_liar: true, points_to_evaluate: [{lr: 0.01}]}`; `{type: random, points_to_evaluate: [...]}`",
        into(&tune_config::search, search_from)),
    row("stop", "mapping", note("none"),
        "`{max_iterations: N, metric_threshold: X, max_time_s: S, at_least: {metric: X}}`; `at_least` stops a trial "
        "once it reports that metric >= X, whatever the mode (Ray's `stop={metric: X}`)",
        read_stop),
    row("stoppers", "list of mappings", note("none"),
        "libtune's stoppers (Ray's built-in ones): `{type: maximum_iteration, max_iter: N}`, `{type: trial_plateau, "
        "metric, std: 0.01, num_results: 4, grace_period: 4, metric_threshold, mode}`, `{type: experiment_plateau, "
        "metric, std: 0.001, top: 10, mode: min, patience: 0}`, `{type: timeout, timeout_s}` ([hooks.md](hooks.md))",
        read_stoppers),
    row("checkpoints", "mapping", value("{num_to_keep: 0}"),
        "which checkpoints of each trial the experiment folder keeps: `{num_to_keep: N, score_attribute: metric, "
        "score_order: max}` (the N best by the metric, else the N newest, and the newest always; 0: every one). A reported checkpoint is kept until this removes it; one that cannot be stored is a warning and an event, and the trial's error when it has none stored",
        read_checkpoints),
    flag("log_to_driver", &tune_config::log_to_driver, value("true"),
         "every trial's standard output and error on `tune run`'s standard error, each line prefixed with `(trial-00001 pid=N) `, at most 2,000 lines a second per trial"),
    flag("show_results", &tune_config::show_results, value("false"), "each result as a line on standard error"),
    row("driver", "mapping", note("none"),
        "written by libtune's Python API: what the Python program that started the experiment answers (its callbacks, "
        "stoppers, searcher, scheduler, functions; [hooks.md](hooks.md)); such a file runs only from that program",
        read_driver),
    whole("max_concurrent_trials", &tune_config::max_concurrent_trials, 0, value("0"),
          "trials at once; 0: as many as the cluster holds"),
    whole("max_failures", &tune_config::max_failures, 0, value("0"),
          "restarts of a failed trial (its process, its node), from its latest checkpoint"),
    row("time_budget_s", "seconds > 0", note("none"), "the whole experiment's time", read_time_budget),
    row("experiment_dir", "folder", note("`tune_results/<name>-<UTC time>`"), "where the experiment goes",
        read_experiment_dir),
    whole("seed", &tune_config::seed, 0, value("0"), "the search's seed"),
    seconds("stop_grace_s", &tune_config::stop_grace_s, false, value("10"), "a stopped trial's time to end"),
    seconds("group_timeout_s", &tune_config::group_timeout_s, true, value("600"),
            "how long a trial's placement group may wait"),
    flag("auto_rebalance", &tune_config::auto_rebalance, value("false"),
         "when nodes join or leave, even the GPU load: trials move, from their checkpoints "
         "([resilience.md](resilience.md))"),
    seconds("min_move_interval_s", &tune_config::min_move_interval_s, false, value("60"),
            "a trial moves at most this often ([resilience.md](resilience.md))"),
    one_of("progress", {"auto", "table", "lines", "none"}, value("auto"),
           "the progress on standard error: a table on a terminal, lines otherwise",
           [](experiment_spec& e, const std::string& t) { e.config.progress = *parse_progress_style(t); }),
    flag("standby_copies", &tune_config::standby_copies, value("true"),
         "[resilience.md](resilience.md): each trial's newest checkpoint copy waits on another node for a restart"),
    row("auto_packing", "mapping", value("{margin: 0.25, min_share: 0.0625, probe_share: 0.25, probe_trials: 1, probe_results: 2}"),
        "with `gpu: auto`: how the share is measured and sized ([auto_packing.md](auto_packing.md))",
        read_auto_packing),
    flag("reuse_workers", &tune_config::reuse_workers, value("false"),
         "[trials.md](trials.md), \"Reused workers\": a Python script's warm process runs the experiment's next "
         "trial on the same cards (its imports and CUDA context kept)"),
    flag("trial_files", &tune_config::trial_files, value("true"),
         "each trial's folder `trials/<id>/` gets TensorBoard's event files (curves and the HParams table), "
         "`progress.csv`, `result.json` and `params.json` ([tracking.md](tracking.md))"),
    row("mlflow", "mapping, or true", note("none"),
        "each trial a run of MLflow: `{tracking_uri: sqlite:///mlflow.db, experiment_name: NAME, tags: {k: v}, "
        "save_artifact: false, registry_uri, tracking_token}` ([tracking.md](tracking.md))",
        tracker_reader(&tune_config::mlflow)),
    row("wandb", "mapping, or true", note("none"),
        "each trial a run of Weights & Biases: `{project: P, group: G, mode: online or offline, entity, dir, "
        "api_key_file, tags: [..], notes, job_type, upload_checkpoints, log_config, excludes: [..], init_timeout}` "
        "([tracking.md](tracking.md))",
        tracker_reader(&tune_config::wandb)),
    row("tracker_python", "command", value("python3"), "the Python that has mlflow / wandb installed (the trackers run in it)",
        read_tracker_python),
    flag("in_place", &program::in_place, value("false"),
         "each trial runs in `working_dir` itself instead of a copy of it, so relative paths out of it (`../data`) "
         "work as when you run the script yourself; one machine only (an embedded cluster, or one whose nodes all run "
         "here), and trials at once share the folder"),
};

const std::vector<key_row>& rows() { return key_table; }

const std::vector<std::string>& key_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& r : rows()) out.push_back(r.about.name);
    return out;
  }();
  return names;
}

// Ray Tune's names for these, and other likely ones.
const std::map<std::string, std::string> top_aliases{
    {"config", "space"},
    {"param_space", "space"},
    {"search_space", "space"},
    {"resources", "resources_per_trial"},
    {"samples", "num_samples"},
    {"search_alg", "search"},
    {"searcher", "search"},
    {"local_dir", "experiment_dir"},
    {"storage_path", "experiment_dir"},
    {"max_concurrent", "max_concurrent_trials"},
    {"metric_patterns", "metric_pattern"},
    {"cwd", "working_dir"},
    {"run", "command"},
    {"placement_strategy", "strategy"},
    {"time_budget", "time_budget_s"}};

// What only the whole file can say: bundles beside resources_per_trial, a space that
// does not hold together, points to evaluate outside it (at the place they were written).
status check_together(const reader& r, const YAML::Node& doc, const experiment_spec& out) {
  if (doc["bundles"] && doc["resources_per_trial"])
    return r.error(doc["bundles"], "bundles", "give either resources_per_trial (one bundle) or bundles, not both");
  if (auto sv = out.space.validate(); !sv) return r.error(doc["space"], "space", sv.message());
  const auto* points = std::visit([](auto& a) -> const std::vector<config>* {
    if constexpr (requires { a.points_to_evaluate; }) return &a.points_to_evaluate;
    else return nullptr;
  }, out.config.search);
  if (!points || !doc["search"] || !doc["search"].IsMap() || !doc["search"]["points_to_evaluate"]) return status::ok();
  for (std::size_t i = 0; i < points->size(); ++i) {
    rng scratch(0);
    if (auto made = out.space.complete((*points)[i], scratch); !made)
      return r.error(doc["search"]["points_to_evaluate"][i], "search.points_to_evaluate[" + std::to_string(i) + "]",
                     made.error().message());
  }
  return status::ok();
}

// --- rendering -----------------------------------------------------------------------------

std::string shown_default_of(const experiment_key& k) {
  return k.default_value.empty() ? k.default_note : "`" + k.default_value + "`";
}

// Markdown as plain text: `code` as code, [text](file.md) as docs/file.md.
std::string plain(const std::string& markdown) {
  static const std::regex same_link{R"(\[([^\]]+)\]\(\1\))"}, link{R"(\[([^\]]+)\]\(([^)]+)\))"};
  auto out = std::regex_replace(markdown, same_link, "docs/$1");
  out = std::regex_replace(out, link, "$1 (docs/$2)");
  out.erase(std::remove(out.begin(), out.end(), '`'), out.end());
  return out;
}

// `text` in lines of at most `width` characters, each after `indent`.
std::string wrapped(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    auto word = text.substr(start, end - start);
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
  return out;
}

}  // namespace

const std::vector<experiment_key>& experiment_keys() {
  static const std::vector<experiment_key> keys = [] {
    std::vector<experiment_key> out;
    for (const auto& r : rows()) out.push_back(r.about);
    return out;
  }();
  return keys;
}

std::string experiment_keys_markdown() {
  std::string out = "| key | value | what | default |\n|---|---|---|---|\n";
  for (const auto& k : experiment_keys())
    out += "| `" + k.name + "` | " + k.type + " | " + k.help + " | " + shown_default_of(k) + " |\n";
  return out;
}

std::string experiment_keys_text(int width) {
  std::string out;
  const auto w = static_cast<size_t>(std::max(40, width));
  for (const auto& k : experiment_keys()) {
    out += "  " + k.name + ": " + plain(k.type) + "; default: " + plain(shown_default_of(k)) + "\n";
    out += wrapped(plain(k.help), 6, w);
  }
  return out;
}

expected<experiment_spec> read_experiment(const std::string& text, const std::string& source, const std::string& base_dir) {
  auto loaded = load(text, source);
  if (!loaded) return loaded.error();
  const YAML::Node& doc = *loaded;
  reader r{source};
  if (!doc.IsMap())
    return r.error(doc, "the file", "an experiment is a mapping of keys (command:, space:, metric:, ...), not " +
                                        std::string{doc.IsSequence() ? "a list" : doc.IsNull() ? "empty" : "a single value"});
  if (auto s = known_keys(r, doc, "", key_names(), top_aliases); !s) return s;
  experiment_spec out;
  out.source = source;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    auto key = it->first.Scalar();
    auto at = std::find(key_names().begin(), key_names().end(), key) - key_names().begin();
    if (auto s = rows()[static_cast<size_t>(at)].read({r, key, base_dir, out}, it->second); !s) return s;
  }
  if (auto s = check_together(r, doc, out); !s) return s;
  return out;
}

}  // namespace tune
