// libtune's search algorithms behind tune::searcher (searchers.hpp): one adapter that
// turns the searcher's JSON results into the algorithm's metric values, and keeps a log
// of what it was told for save() and restore().
#include "tune/tuner/searchers.hpp"

#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

namespace tune {

namespace {

using make_fn = std::function<expected<std::unique_ptr<search_algorithm>>(const search_properties&)>;

// A finite number at `key` of a result, if there is one.
std::optional<double> number_at(const nlohmann::json& result, const std::string& key) {
  if (!result.is_object()) return std::nullopt;
  auto it = result.find(key);
  if (it == result.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

// A trial it never suggested (one suggested after the state it was restored from), or
// one it was told of as complete already: nothing to learn, and no reason to end the
// experiment (the values it is given are checked before: finite, one per objective).
bool ignorable(const status& s) { return s.code() == errc::not_found || s.code() == errc::invalid_argument; }

class algorithm_searcher final : public searcher {
 public:
  // several: it models several objectives and constraints (TPE); per_budget: it learns
  // from every intermediate result (BOHB), so they are part of its saved state.
  algorithm_searcher(std::string name, make_fn make, bool several, bool per_budget)
      : name_(std::move(name)), make_(std::move(make)), several_(several), per_budget_(per_budget) {}

  status set_search_properties(const search_properties& p) override {
    if (!several_ && p.metrics.size() > 1)
      return {errc::invalid_argument, name_ + " models one metric, and the experiment has " +
                                          std::to_string(p.metrics.size()) + ": use tpe_searcher() for several"};
    if (!several_ && !p.constraints.empty())
      return {errc::invalid_argument, name_ + " does not model constraints: use tpe_searcher() with constraints"};
    props_ = p;
    if (props_.metrics.empty()) props_.metrics = {{p.metric, p.mode}};
    auto a = make_(props_);
    if (!a) return a.error();
    algo_ = std::move(a).value();
    log_ = nlohmann::json::array();
    last_.clear();
    return {};
  }

  std::optional<config> suggest(const std::string& trial_id) override {
    auto c = algorithm().suggest(trial_id);
    if (!c) throw std::runtime_error(c.error().message());
    if (c->has_value()) log_.push_back({{"s", trial_id}, {"c", **c}});
    return *c;
  }

  bool finished() const override { return algo_ && algo_->finished(); }

  void on_trial_result(const std::string& trial_id, const nlohmann::json& result) override {
    auto v = number_at(result, props_.metric);
    if (!v) return;  // a result without the metric (or not a finite number) teaches nothing
    last_[trial_id] = *v;
    if (!per_budget_) return;
    int64_t iteration = result.value("training_iteration", int64_t{0});
    auto s = algorithm().on_result(trial_id, iteration, *v);
    if (ignorable(s)) return;
    if (!s) throw std::runtime_error(s.message());
    log_.push_back({{"r", trial_id}, {"i", iteration}, {"v", *v}});
  }

  void on_trial_complete(const std::string& trial_id, const nlohmann::json& last_result, bool error) override {
    (void)error;  // a failed trial's last reported values still count (Ray's searchers: its last result)
    nlohmann::json entry{{"e", trial_id}};
    status s;
    if (props_.metrics.size() > 1 || !props_.constraints.empty()) {
      std::vector<double> values, constraints;
      for (auto& o : props_.metrics)
        if (auto v = number_at(last_result, o.name)) values.push_back(*v);
      for (auto& k : props_.constraints)
        if (auto v = number_at(last_result, k)) constraints.push_back(*v);
      if (values.size() == props_.metrics.size() && constraints.size() == props_.constraints.size()) {
        s = algorithm().on_complete(trial_id, values, constraints);
        entry["v"] = values;
        entry["k"] = constraints;
      } else {
        s = algorithm().on_complete(trial_id, std::nullopt);  // not every value: forgotten
      }
    } else {
      std::optional<double> v = number_at(last_result, props_.metric);
      if (!v)
        if (auto it = last_.find(trial_id); it != last_.end()) v = it->second;
      s = algorithm().on_complete(trial_id, v);
      if (v) entry["v"] = *v;
    }
    last_.erase(trial_id);
    if (ignorable(s)) return;
    if (!s) throw std::runtime_error(s.message());
    log_.push_back(std::move(entry));
  }

  std::string save() const override { return nlohmann::json{{"searcher", name_}, {"log", log_}}.dump(); }

  status restore(const std::string& state) override {
    if (!algo_) return {errc::inconsistent, name_ + ": restore() before set_search_properties()"};
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (!j.is_object() || !j.contains("log") || !j["log"].is_array() || j.value("searcher", "") != name_)
      return {errc::invalid_argument, name_ + ": the saved state is not a " + name_ + " searcher's"};
    auto fresh = make_(props_);
    if (!fresh) return fresh.error();
    auto a = std::move(fresh).value();
    try {
      if (auto s = replay(*a, j["log"]); !s) return s;
    } catch (const nlohmann::json::exception& e) {
      return {errc::invalid_argument, name_ + ": its saved state is damaged (" + e.what() + ")"};
    }
    algo_ = std::move(a);
    log_ = j["log"];
    last_.clear();
    return {};
  }

  std::string name() const override { return name_; }

 private:
  // The saved log told again, in order, to a new algorithm `a`.
  status replay(search_algorithm& algo, const nlohmann::json& log) const {
    auto* a = &algo;  // a damaged entry throws (at()), which restore() says
    for (auto& e : log) {
      status s;
      if (e.contains("s")) {
        auto id = e.at("s").get<std::string>();
        auto c = a->suggest(id);
        if (!c) return c.error();
        if (!c->has_value() || **c != e.at("c"))
          return {errc::inconsistent, name_ + ": replaying its saved state, trial " + id +
                                          " got another configuration than it had: the space or the seed changed"};
      } else if (e.contains("r")) {
        s = a->on_result(e.at("r").get<std::string>(), e.at("i").get<int64_t>(), e.at("v").get<double>());
      } else if (e.contains("e")) {
        auto id = e.at("e").get<std::string>();
        if (!e.contains("v")) s = a->on_complete(id, std::nullopt);
        else if (e.contains("k")) s = a->on_complete(id, e.at("v").get<std::vector<double>>(), e.at("k").get<std::vector<double>>());
        else s = a->on_complete(id, e.at("v").get<double>());
      }
      if (!s) return {s.code(), name_ + ": replaying its saved state: " + s.message()};
    }
    return {};
  }

  search_algorithm& algorithm() {
    if (!algo_) throw std::runtime_error(name_ + " was asked before set_search_properties() (the experiment calls it)");
    return *algo_;
  }

  std::string name_;
  make_fn make_;
  bool several_, per_budget_;
  search_properties props_;
  std::unique_ptr<search_algorithm> algo_;
  nlohmann::json log_ = nlohmann::json::array();
  std::unordered_map<std::string, double> last_;  // each running trial's latest metric value
};

// The experiment's mode, num_samples and (unless the options give one) seed.
template <class Options>
Options with_experiment(Options o, const search_properties& p) {
  o.metric_mode = p.mode;
  o.num_samples = p.num_samples;
  if (o.seed == 0) o.seed = p.seed;
  return o;
}

}  // namespace

std::shared_ptr<searcher> tpe_searcher(tpe_options options) {
  return std::make_shared<algorithm_searcher>(
      "tpe",
      [options](const search_properties& p) {
        auto o = with_experiment(options, p);
        o.directions.clear();
        if (p.metrics.size() > 1)
          for (auto& m : p.metrics) o.directions.push_back(m.direction);
        return make_tpe(p.space, std::move(o));
      },
      true, false);
}

std::shared_ptr<searcher> gp_searcher(gp_options options) {
  return std::make_shared<algorithm_searcher>(
      "gp", [options](const search_properties& p) { return make_gp(p.space, with_experiment(options, p)); }, false, false);
}

std::shared_ptr<searcher> bohb_searcher(bohb_options options) {
  return std::make_shared<algorithm_searcher>(
      "bohb", [options](const search_properties& p) { return make_bohb(p.space, with_experiment(options, p)); }, false,
      true);
}

std::shared_ptr<searcher> random_searcher(random_search_options options) {
  return std::make_shared<algorithm_searcher>(
      "random",
      [options](const search_properties& p) -> expected<std::unique_ptr<search_algorithm>> {
        if (p.space.grid().size() > 1)
          return status{errc::invalid_argument,
                        "random_searcher: the space has grid_search domains, and a searcher is asked num_samples "
                        "configurations in all: for every grid point num_samples times, use search = "
                        "tune::random_search_alg{} (libtune's BasicVariantGenerator)"};
        auto o = options;
        o.num_samples = p.num_samples;
        if (o.seed == 0) o.seed = p.seed;
        return make_random_search(p.space, std::move(o));
      },
      false, false);
}

}  // namespace tune
