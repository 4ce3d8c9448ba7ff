#include "tune/run/experiment.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "tune/core/json_text.hpp"
#include "tune/core/quantity.hpp"
#include "tune/trial/output_metrics.hpp"

namespace tune {

namespace {

namespace fs = std::filesystem;

// --- reading YAML as JSON values ---------------------------------------------------------

// A plain scalar as YAML 1.2's core schema reads it (null, booleans, integers, floats,
// else text); a quoted one is always text. (YAML 1.1 readers such as PyYAML read 1e-4 as
// text; here it is a number, as JSON would have it.)
nlohmann::json scalar_value(const YAML::Node& n) {
  const std::string& v = n.Scalar();
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return v;
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  static const std::regex integer{R"([-+]?[0-9]+)"};
  static const std::regex real{R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)"};
  if (std::regex_match(v, integer)) {
    errno = 0;
    long long i = std::strtoll(v.c_str(), nullptr, 10);
    if (errno == 0) return static_cast<int64_t>(i);
  }
  if (std::regex_match(v, real)) return std::strtod(v.c_str(), nullptr);
  return v;
}

struct reader {
  std::string source;

  std::string where(const YAML::Node& n) const {
    auto m = n.Mark();
    if (m.is_null() || m.line < 0) return source + ": ";
    return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
  }
  status error(const YAML::Node& n, const std::string& path, const std::string& what) const {
    return status{errc::invalid_argument, where(n) + path + ": " + what};
  }

  expected<nlohmann::json> json(const YAML::Node& n, const std::string& path) const {
    switch (n.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nlohmann::json(nullptr);
      case YAML::NodeType::Scalar: {
        auto v = scalar_value(n);
        if (v.is_number_float() && !std::isfinite(v.get<double>())) return error(n, path, "not a finite number");
        return v;
      }
      case YAML::NodeType::Sequence: {
        auto out = nlohmann::json::array();
        for (size_t i = 0; i < n.size(); ++i) {
          auto v = json(n[i], path + "[" + std::to_string(i) + "]");
          if (!v) return v.error();
          out.push_back(std::move(*v));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        auto out = nlohmann::json::object();
        for (auto it = n.begin(); it != n.end(); ++it) {
          auto key = it->first.Scalar();
          if (out.contains(key)) return error(it->first, path, "\"" + key + "\" is given twice");
          auto v = json(it->second, path + "." + key);
          if (!v) return v.error();
          out[key] = std::move(*v);
        }
        return out;
      }
    }
    return nlohmann::json(nullptr);
  }

  // Typed values, each error naming what to write.
  expected<std::string> text(const YAML::Node& n, const std::string& path) const {
    if (!n.IsScalar()) return error(n, path, "give a text");
    return n.Scalar();
  }
  expected<double> number(const YAML::Node& n, const std::string& path) const {
    auto v = n.IsScalar() ? scalar_value(n) : nlohmann::json();
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      return error(n, path, "give a number, not " + (n.IsScalar() ? "'" + n.Scalar() + "'" : std::string{"a list or mapping"}));
    return v.get<double>();
  }
  expected<int64_t> integer(const YAML::Node& n, const std::string& path, int64_t at_least) const {
    auto v = n.IsScalar() ? scalar_value(n) : nlohmann::json();
    if (!v.is_number_integer() || v.get<int64_t>() < at_least)
      return error(n, path, "give a whole number of at least " + std::to_string(at_least) + ", not " +
                                (n.IsScalar() ? "'" + n.Scalar() + "'" : std::string{"a list or mapping"}));
    return v.get<int64_t>();
  }
  expected<bool> flag(const YAML::Node& n, const std::string& path) const {
    auto v = n.IsScalar() ? scalar_value(n) : nlohmann::json();
    if (!v.is_boolean()) return error(n, path, "give true or false");
    return v.get<bool>();
  }
  expected<std::string> one_of(const YAML::Node& n, const std::string& path, const std::vector<std::string>& options) const {
    auto t = text(n, path);
    if (!t) return t;
    if (std::find(options.begin(), options.end(), *t) != options.end()) return t;
    std::string list;
    for (auto& o : options) list += (list.empty() ? "" : ", ") + o;
    return error(n, path, "'" + *t + "' is not one of " + list);
  }
  expected<std::vector<double>> numbers(const YAML::Node& n, const std::string& path, size_t count, const std::string& shape) const {
    if (!n.IsSequence() || (count && n.size() != count)) return error(n, path, "give " + shape);
    std::vector<double> out;
    for (size_t i = 0; i < n.size(); ++i) {
      auto v = number(n[i], path + "[" + std::to_string(i) + "]");
      if (!v) return v.error();
      out.push_back(*v);
    }
    return out;
  }
};

// --- names ---------------------------------------------------------------------------

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "did you mean X?" for a key that is close to one of `known` (or a Ray Tune name).
std::string suggestion(const std::string& key, const std::vector<std::string>& known,
                       const std::map<std::string, std::string>& aliases = {}) {
  if (auto a = aliases.find(key); a != aliases.end()) return " (libtune calls it " + a->second + ")";
  std::string best;
  size_t best_d = 3;
  for (auto& k : known)
    if (auto d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

// Where a key is, for messages: "key" at the top level (path ""), else "path.key".
std::string joined(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// Checks the keys of a mapping; the error names the unknown one, where, and what there is.
status known_keys(const reader& r, const YAML::Node& map, const std::string& path, const std::vector<std::string>& known,
                  const std::map<std::string, std::string>& aliases = {}) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) return r.error(it->first, path, "keys are names");
    auto key = it->first.Scalar();
    if (!seen.insert(key).second) return r.error(it->first, joined(path, key), "given twice");
    if (std::find(known.begin(), known.end(), key) == known.end())
      return r.error(it->first, joined(path, key),
                     "unknown key" + suggestion(key, known, aliases) + "; " + (path.empty() ? "an experiment" : path) +
                         " has: " + listed(known));
  }
  return status::ok();
}

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

expected<YAML::Node> load(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::string at = e.mark.is_null() ? "" : ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    return status{errc::invalid_argument, source + at + ": not valid YAML or JSON: " + e.msg};
  }
}

template <class T, class F>
expected<T> read_part(const std::string& text, const std::string& source, F&& f) {
  auto n = load(text, source);
  if (!n) return n.error();
  reader r{source};
  return f(r, *n, std::string{});
}

const std::vector<std::string> top_keys{
    "name",          "command",      "working_dir",    "working_dir_limit",     "env",
    "config_args",   "metric_pattern", "space",        "metric",                "mode",
    "metrics",       "constraints",
    "num_samples",   "resources_per_trial", "bundles", "strategy",              "scheduler",
    "search",        "stop",         "max_concurrent_trials", "max_failures",  "time_budget_s",
    "experiment_dir", "seed",        "stop_grace_s",   "group_timeout_s",       "auto_rebalance",
    "min_move_interval_s", "progress",  "standby_copies", "auto_packing", "reuse_workers", "in_place"};

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

fs::path from_base(const std::string& base, const std::string& p) {
  return fs::path(p).is_absolute() ? fs::path(p) : (fs::path(base) / p).lexically_normal();
}

}  // namespace

const std::vector<std::string>& experiment_keys() { return top_keys; }

std::optional<progress_style> parse_progress_style(const std::string& text) {
  if (text == "auto") return progress_style::automatic;
  if (text == "table") return progress_style::table;
  if (text == "lines") return progress_style::lines;
  if (text == "none") return progress_style::none;
  return std::nullopt;
}

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

expected<experiment_spec> read_experiment(const std::string& text, const std::string& source, const std::string& base_dir) {
  auto loaded = load(text, source);
  if (!loaded) return loaded.error();
  const YAML::Node& doc = *loaded;
  reader r{source};
  if (!doc.IsMap())
    return r.error(doc, "the file", "an experiment is a mapping of keys (command:, space:, metric:, ...), not " +
                                        std::string{doc.IsSequence() ? "a list" : doc.IsNull() ? "empty" : "a single value"});
  if (auto s = known_keys(r, doc, "", top_keys, top_aliases); !s) return s;
  experiment_spec out;
  out.source = source;
  auto& c = out.config;
  auto& p = out.prog;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    auto key = it->first.Scalar();
    const auto& v = it->second;
    status s;
    auto take = [&](auto got, auto& field) {
      if (!got) s = got.error();
      else field = *got;
    };
    if (key == "name") {
      take(r.text(v, key), c.name);
      if (s && (c.name.empty() || c.name.find('/') != std::string::npos)) s = r.error(v, key, "give a name without '/'");
    } else if (key == "command") {
      if (v.IsScalar())
        s = r.error(v, key, "give the command as a list, e.g. [python3, train.py, --epochs, \"8\"]: libtune runs no shell, "
                            "so a command line in one text would not be split into arguments");
      else if (!v.IsSequence() || v.size() == 0)
        s = r.error(v, key, "give the command as a non-empty list, e.g. [python3, train.py]");
      else
        for (size_t i = 0; i < v.size() && s; ++i) {
          if (!v[i].IsScalar()) s = r.error(v[i], key + "[" + std::to_string(i) + "]", "each argument is a text");
          else p.command.push_back(v[i].Scalar());
        }
    } else if (key == "working_dir") {
      if (v.IsNull()) p.working_dir.clear();  // nothing shipped
      else if (auto t = r.text(v, key); !t) s = t.error();
      else p.working_dir = t->empty() ? "" : from_base(base_dir, *t).string();
    } else if (key == "working_dir_limit") {
      auto t = r.text(v, key);
      auto b = t ? parse_bytes(*t, key) : expected<int64_t>{t.error()};
      if (!b || *b <= 0) s = r.error(v, key, "give a size, e.g. 200MiB or 1GiB");
      else p.working_dir_limit = static_cast<uint64_t>(*b);
    } else if (key == "env") {
      // NAME: VALUE, or NAME with no value: this process's value; or a list of NAME=VALUE / NAME.
      auto add = [&](const std::string& name, const YAML::Node* value, const YAML::Node& at) {
        if (auto ok = check_env_name(name); !ok) return r.error(at, "env." + name, ok.message());
        if (!value || value->IsNull()) p.forward_env.push_back(name);
        else if (!value->IsScalar()) return r.error(*value, "env." + name, "give a text");
        else p.env[name] = value->Scalar();
        return status::ok();
      };
      if (v.IsMap()) {
        for (auto e = v.begin(); e != v.end() && s; ++e) s = add(e->first.Scalar(), &e->second, e->first);
      } else if (v.IsSequence()) {
        for (size_t i = 0; i < v.size() && s; ++i) {
          if (!v[i].IsScalar()) {
            s = r.error(v[i], key, "each entry is NAME=VALUE or NAME");
            continue;
          }
          auto item = v[i].Scalar();
          auto eq = item.find('=');
          YAML::Node value(item.substr(eq == std::string::npos ? item.size() : eq + 1));
          s = add(item.substr(0, eq), eq == std::string::npos ? nullptr : &value, v[i]);
        }
      } else if (!v.IsNull()) {
        s = r.error(v, key, "give a mapping (NAME: VALUE, or NAME: with no value to take this process's), or a list of NAME=VALUE");
      }
    } else if (key == "config_args") {
      auto t = r.one_of(v, key, {"none", "append"});
      if (!t) s = t.error();
      else p.args = *t == "append" ? config_args::append : config_args::none;
    } else if (key == "metric_pattern") {
      if (v.IsScalar()) {
        p.metric_patterns = {v.Scalar()};
      } else if (v.IsSequence()) {
        for (size_t i = 0; i < v.size() && s; ++i) {
          if (!v[i].IsScalar()) s = r.error(v[i], key, "each pattern is a text");
          else p.metric_patterns.push_back(v[i].Scalar());
        }
      } else {
        s = r.error(v, key, "give a pattern (e.g. 'val_acc=(\\S+)') or a list of them");
      }
      for (size_t i = 0; i < p.metric_patterns.size() && s; ++i)  // compiled here: errors point at the file
        if (auto m = output_metrics::make({p.metric_patterns[i]}, "metric"); !m) s = r.error(v, key, m.error().message());
    } else if (key == "space") {
      take(space_from(r, v, "space"), out.space);
    } else if (key == "metric") {
      take(r.text(v, key), c.metric);
      if (s && c.metric.empty()) s = r.error(v, key, "give the name of the metric the trials report");
    } else if (key == "mode") {
      auto t = r.one_of(v, key, {"max", "min"});
      if (!t) s = t.error();
      else c.mode = *t == "max" ? mode::max : mode::min;
    } else if (key == "metrics") {
      take(objectives_from(r, v, key), c.metrics);
    } else if (key == "constraints") {
      take(names_from(r, v, key), c.constraints);
    } else if (key == "num_samples") {
      take(r.integer(v, key, 1), c.num_samples);
    } else if (key == "resources_per_trial") {
      take(resources_from(r, v, key), c.resources_per_trial);
    } else if (key == "bundles") {
      if (!v.IsSequence() || v.size() == 0) s = r.error(v, key, "give a list of bundles, e.g. [{gpu: 1}, {cpu: 4}]");
      for (size_t i = 0; s && v.IsSequence() && i < v.size(); ++i) {
        auto b = resources_from(r, v[i], key + "[" + std::to_string(i) + "]");
        if (!b) s = b.error();
        else c.bundles.push_back(*b);
      }
    } else if (key == "strategy") {
      auto t = r.text(v, key);
      auto st = t ? parse_strategy(*t) : expected<strategy>{t.error()};
      if (!st) s = r.error(v, key, "give pack, spread, strict_pack or strict_spread");
      else c.strategy = *st;
    } else if (key == "scheduler") {
      take(scheduler_from(r, v, key), c.scheduler);
    } else if (key == "search") {
      take(search_from(r, v, key), c.search);
    } else if (key == "stop") {
      if (!v.IsMap()) {
        s = r.error(v, key, "give a mapping, e.g. {max_iterations: 20, metric_threshold: 0.95}");
      } else {
        s = known_keys(r, v, key, {"max_iterations", "metric_threshold", "max_time_s"}, {{"training_iteration", "max_iterations"}});
        for (auto e = v.begin(); s && e != v.end(); ++e) {
          auto k = e->first.Scalar();
          if (k == "max_iterations") {
            auto n = r.integer(e->second, "stop." + k, 1);
            if (!n) s = n.error();
            else c.stop.max_iterations = *n;
          } else {
            auto x = r.number(e->second, "stop." + k);
            if (!x) s = x.error();
            else if (k == "max_time_s" && !(*x > 0)) s = r.error(e->second, "stop." + k, "give a time above 0");
            else if (k == "max_time_s") c.stop.max_time_s = *x;
            else c.stop.metric_threshold = *x;
          }
        }
      }
    } else if (key == "max_concurrent_trials") {
      take(r.integer(v, key, 0), c.max_concurrent_trials);
    } else if (key == "max_failures") {
      take(r.integer(v, key, 0), c.max_failures);
    } else if (key == "time_budget_s") {
      auto x = r.number(v, key);
      if (!x) s = x.error();
      else if (!(*x > 0)) s = r.error(v, key, "give a time above 0 (seconds)");
      else c.time_budget_s = *x;
    } else if (key == "experiment_dir") {
      auto t = r.text(v, key);
      if (!t || t->empty()) s = r.error(v, key, "give a folder");
      else c.experiment_dir = from_base(base_dir, *t).string();
    } else if (key == "seed") {
      auto n = r.integer(v, key, 0);
      if (!n) s = n.error();
      else c.seed = static_cast<uint64_t>(*n);
    } else if (key == "stop_grace_s" || key == "group_timeout_s" || key == "min_move_interval_s") {
      auto x = r.number(v, key);
      if (!x) s = x.error();
      else if (*x < 0 || (key == "group_timeout_s" && *x == 0)) s = r.error(v, key, key == "group_timeout_s" ? "give a time above 0" : "give a time of 0 or more");
      else (key == "stop_grace_s" ? c.stop_grace_s : key == "group_timeout_s" ? c.group_timeout_s : c.min_move_interval_s) = *x;
    } else if (key == "auto_rebalance") {
      take(r.flag(v, key), c.auto_rebalance);
    } else if (key == "standby_copies") {
      take(r.flag(v, key), c.standby_copies);
    } else if (key == "reuse_workers") {
      take(r.flag(v, key), c.reuse_workers);
    } else if (key == "in_place") {
      take(r.flag(v, key), p.in_place);
    } else if (key == "auto_packing") {
      if (!v.IsMap()) {
        s = r.error(v, key, "give a mapping, e.g. {margin: 0.25, min_share: 0.0625}");
      } else {
        s = known_keys(r, v, key, {"margin", "probe_share", "probe_trials", "probe_results", "min_share"}, {});
        for (auto e = v.begin(); s && e != v.end(); ++e) {
          auto k = e->first.Scalar();
          if (k == "probe_trials" || k == "probe_results") {
            auto n = r.integer(e->second, key + "." + k, 1);
            if (!n) s = n.error();
            else (k == "probe_trials" ? c.auto_packing.probe_trials : c.auto_packing.probe_results) = static_cast<int>(*n);
          } else {
            auto x = r.number(e->second, key + "." + k);
            if (!x) s = x.error();
            else (k == "margin" ? c.auto_packing.margin : k == "probe_share" ? c.auto_packing.probe_share : c.auto_packing.min_share) = *x;
          }
        }
        if (s)
          if (auto ok = check(c.auto_packing); !ok) s = r.error(v, key, ok.message().substr(std::string{"auto_packing: "}.size()));
      }
    } else if (key == "progress") {
      auto t = r.one_of(v, key, {"auto", "table", "lines", "none"});
      if (!t) s = t.error();
      else c.progress = *parse_progress_style(*t);
    }
    if (!s) return s;
  }
  if (doc["bundles"] && doc["resources_per_trial"])
    return r.error(doc["bundles"], "bundles", "give either resources_per_trial (one bundle) or bundles, not both");
  if (auto sv = out.space.validate(); !sv) return r.error(doc["space"], "space", sv.message());
  // Points to evaluate fit the space (at the place they were written).
  const auto* points = std::visit([](auto& a) -> const std::vector<config>* {
    if constexpr (requires { a.points_to_evaluate; }) return &a.points_to_evaluate;
    else return nullptr;
  }, c.search);
  if (points && doc["search"] && doc["search"].IsMap() && doc["search"]["points_to_evaluate"])
    for (std::size_t i = 0; i < points->size(); ++i) {
      rng scratch(0);
      if (auto made = out.space.complete((*points)[i], scratch); !made)
        return r.error(doc["search"]["points_to_evaluate"][i], "search.points_to_evaluate[" + std::to_string(i) + "]",
                       made.error().message());
    }
  return out;
}

expected<experiment_spec> read_experiment_file(const std::string& path) {
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
