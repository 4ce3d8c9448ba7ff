// Inside tune/run/: reading an experiment's YAML (or JSON) into typed values, each error
// naming the file, the line and column, the key, and what to write instead; and the
// parts of an experiment (a space, a scheduler, a search, resources, objectives) that
// experiment.cpp reads and the key table (experiment_keys.cpp) uses. Not installed.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tune/tuner/plan.hpp"

namespace tune::yaml_reader {

// A plain scalar as YAML 1.2's core schema reads it (null, booleans, integers, floats,
// else text); a quoted one is always text. (YAML 1.1 readers such as PyYAML read 1e-4 as
// text; here it is a number, as JSON would have it.)
nlohmann::json scalar_value(const YAML::Node& n);

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

// How many letters differ between a and b (insertions, deletions, changes; case ignored).
size_t edit_distance(const std::string& a, const std::string& b);
// "a, b, c".
std::string listed(const std::vector<std::string>& names);
// " (did you mean X?)" for a key that is close to one of `known`, " (libtune calls it X)"
// for one of `aliases` (a Ray Tune name); "" otherwise.
std::string suggestion(const std::string& key, const std::vector<std::string>& known,
                       const std::map<std::string, std::string>& aliases = {});
// Where a key is, for messages: "key" at the top level (path ""), else "path.key".
std::string joined(const std::string& path, const std::string& key);
// Checks the keys of a mapping; the error names the unknown one, where, and what there is.
status known_keys(const reader& r, const YAML::Node& map, const std::string& path, const std::vector<std::string>& known,
                  const std::map<std::string, std::string>& aliases = {});

// The text as YAML; a syntax error names `source`, the line and column.
expected<YAML::Node> load(const std::string& text, const std::string& source);
// `p` from the folder `base` (an absolute `p` as it is).
std::filesystem::path from_base(const std::string& base, const std::string& p);

// The parts of an experiment (experiment.cpp), `path` naming where they are.
expected<search_space> space_from(const reader& r, const YAML::Node& n, const std::string& path);
expected<scheduler_spec> scheduler_from(const reader& r, const YAML::Node& n, const std::string& path);
expected<search_spec> search_from(const reader& r, const YAML::Node& n, const std::string& path);
// {gpu: 0.25, cpu: 1}; gpu: auto only where path is resources_per_trial.
expected<resources> resources_from(const reader& r, const YAML::Node& n, const std::string& path);
// metrics: {acc: max, latency_ms: min}, in the order written (the first is the metric).
expected<std::vector<objective>> objectives_from(const reader& r, const YAML::Node& n, const std::string& path);
// constraints: [mem_over, ms_over]: metrics that must be <= 0.
expected<std::vector<std::string>> names_from(const reader& r, const YAML::Node& n, const std::string& path);

}  // namespace tune::yaml_reader
