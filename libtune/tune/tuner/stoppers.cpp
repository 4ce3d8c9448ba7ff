#include "tune/tuner/stoppers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tune {

namespace {

std::string shown_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

status bad_option(const std::string& who, const std::string& option, const std::string& rule, const std::string& got) {
  return {errc::invalid_argument, who + ": " + option + " must be " + rule + ", not " + got};
}

// numpy.std of the values: the population's standard deviation.
double population_std(const auto& values) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double sum = 0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size()));
}

template <class... F>
struct stopper_visit : F... {
  using F::operator()...;
};
template <class... F>
stopper_visit(F...) -> stopper_visit<F...>;

}  // namespace

std::string describe(const stopper_spec& s) {
  return std::visit(stopper_visit{
                        [](const maximum_iteration_stopper& m) { return "maximum_iteration(" + std::to_string(m.max_iter) + ")"; },
                        [](const trial_plateau_stopper& t) { return "trial_plateau(" + t.metric + ")"; },
                        [](const experiment_plateau_stopper& e) { return "experiment_plateau(" + e.metric + ")"; },
                        [](const timeout_stopper& t) { return "timeout(" + shown_number(t.timeout_s) + " s)"; },
                        [](const metric_at_least& m) { return m.metric + " >= " + shown_number(m.value); },
                        [](const std::shared_ptr<stopper>& p) { return p ? p->name() : std::string{"stopper"}; },
                    },
                    s);
}

status check_stopper(const stopper_spec& s) {
  return std::visit(
      stopper_visit{
          [](const maximum_iteration_stopper& m) -> status {
            if (m.max_iter < 1) return bad_option("maximum_iteration_stopper", "max_iter", "at least 1", std::to_string(m.max_iter));
            return {};
          },
          [](const trial_plateau_stopper& t) -> status {
            const std::string who = "trial_plateau_stopper";
            if (t.metric.empty()) return {errc::invalid_argument, who + ": say which metric (metric)"};
            if (!(t.std > 0) || !std::isfinite(t.std)) return bad_option(who, "std", "a number above 0", shown_number(t.std));
            if (t.num_results < 1) return bad_option(who, "num_results", "at least 1", std::to_string(t.num_results));
            if (t.grace_period < 0) return bad_option(who, "grace_period", "0 or more", std::to_string(t.grace_period));
            if (t.metric_threshold && !t.mode)
              return {errc::invalid_argument,
                      who + ": metric_threshold needs a mode (min: stopped only below it, max: only above it)"};
            if (t.metric_threshold && !std::isfinite(*t.metric_threshold))
              return bad_option(who, "metric_threshold", "a finite number", shown_number(*t.metric_threshold));
            return {};
          },
          [](const experiment_plateau_stopper& e) -> status {
            const std::string who = "experiment_plateau_stopper";
            if (e.metric.empty()) return {errc::invalid_argument, who + ": say which metric (metric)"};
            if (!(e.std > 0) || !std::isfinite(e.std)) return bad_option(who, "std", "a number above 0", shown_number(e.std));
            if (e.top < 2) return bad_option(who, "top", "at least 2", std::to_string(e.top));
            if (e.patience < 0) return bad_option(who, "patience", "0 or more", std::to_string(e.patience));
            return {};
          },
          [](const timeout_stopper& t) -> status {
            if (!(t.timeout_s > 0) || !std::isfinite(t.timeout_s))
              return bad_option("timeout_stopper", "timeout_s", "seconds above 0", shown_number(t.timeout_s));
            return {};
          },
          [](const metric_at_least& m) -> status {
            if (m.metric.empty()) return {errc::invalid_argument, "a stop on a metric needs the metric's name"};
            if (!std::isfinite(m.value)) return bad_option("stop on " + m.metric, "its value", "a finite number", shown_number(m.value));
            return {};
          },
          [](const std::shared_ptr<stopper>& p) -> status {
            if (!p) return {errc::invalid_argument, "a stopper of the user's own is null: give an object (std::make_shared)"};
            return {};
          },
      },
      s);
}

std::vector<std::shared_ptr<stopper>> user_stoppers(const std::vector<stopper_spec>& specs) {
  std::vector<std::shared_ptr<stopper>> out;
  for (auto& s : specs)
    if (auto* p = std::get_if<std::shared_ptr<stopper>>(&s)) out.push_back(*p);
  return out;
}

expected<stop_rules> stop_rules::make(const std::vector<stopper_spec>& specs) {
  stop_rules out;
  auto column = [&](const std::string& metric) {
    auto it = std::find(out.metrics_.begin(), out.metrics_.end(), metric);
    if (it != out.metrics_.end()) return static_cast<size_t>(it - out.metrics_.begin());
    out.metrics_.push_back(metric);
    return out.metrics_.size() - 1;
  };
  for (auto& s : specs) {
    if (auto st = check_stopper(s); !st) return st;
    if (std::holds_alternative<std::shared_ptr<stopper>>(s)) continue;
    rule r;
    r.spec = s;
    if (auto* t = std::get_if<trial_plateau_stopper>(&s)) r.columns.push_back(column(t->metric));
    if (auto* e = std::get_if<experiment_plateau_stopper>(&s)) r.columns.push_back(column(e->metric));
    if (auto* m = std::get_if<metric_at_least>(&s)) r.columns.push_back(column(m->metric));
    out.rules_.push_back(std::move(r));
  }
  return out;
}

std::string stop_rules::on_result(const std::string& trial, const std::vector<std::optional<double>>& values) {
  auto at = [&](const rule& r) { return r.columns.empty() || r.columns[0] >= values.size() ? std::nullopt : values[r.columns[0]]; };
  std::string why;
  for (auto& r : rules_) {
    std::string said = std::visit(
        stopper_visit{
            [&](const maximum_iteration_stopper& m) -> std::string {
              return ++r.counts[trial] >= m.max_iter ? "maximum_iteration_stopper: its " + std::to_string(m.max_iter) +
                                                           (m.max_iter == 1 ? "st" : "th") + " result"
                                                     : "";
            },
            [&](const trial_plateau_stopper& t) -> std::string {
              auto v = at(r);
              auto& window = r.windows[trial];
              if (v) {
                window.push_back(*v);
                if (static_cast<int64_t>(window.size()) > t.num_results) window.pop_front();
              }
              if (++r.counts[trial] < t.grace_period || static_cast<int64_t>(window.size()) < t.num_results || !v)
                return "";
              if (t.metric_threshold && t.mode &&
                  (*t.mode == mode::min ? *v > *t.metric_threshold : *v < *t.metric_threshold))
                return "";
              double s = population_std(window);
              return s < t.std ? "trial_plateau_stopper: " + t.metric + " varied by " + shown_number(s) + " (std) over its last " +
                                     std::to_string(t.num_results) + " results"
                               : "";
            },
            [&](const experiment_plateau_stopper& e) -> std::string {
              if (auto v = at(r)) {
                r.top.push_back(*v);
                std::sort(r.top.begin(), r.top.end());
                if (static_cast<int64_t>(r.top.size()) > e.top) {
                  if (e.mode == mode::min) r.top.resize(static_cast<size_t>(e.top));
                  else r.top.erase(r.top.begin(), r.top.end() - e.top);
                }
              }
              bool plateau = static_cast<int64_t>(r.top.size()) == e.top && population_std(r.top) <= e.std;
              r.plateaued = plateau ? r.plateaued + 1 : 0;
              if (plateau && r.plateaued >= e.patience && !r.fired) {
                r.fired = true;
                fired_ = "experiment_plateau_stopper: the best " + std::to_string(e.top) + " values of " + e.metric +
                         " varied by " + shown_number(population_std(r.top)) + " (std)";
              }
              return r.fired ? fired_ : "";
            },
            [&](const timeout_stopper&) -> std::string { return ""; },
            [&](const metric_at_least& m) -> std::string {
              auto v = at(r);
              return v && *v >= m.value ? "reached " + m.metric + " " + shown_number(*v) + " (stop at >= " + shown_number(m.value) + ")"
                                        : "";
            },
            [&](const std::shared_ptr<stopper>&) -> std::string { return ""; },
        },
        r.spec);
    if (why.empty()) why = said;  // every rule sees every result (their counts), the first to fire says why
  }
  return why;
}

std::string stop_rules::stop_all(double now_s) const {
  if (!fired_.empty()) return fired_;
  for (auto& r : rules_)
    if (auto* t = std::get_if<timeout_stopper>(&r.spec); t && now_s >= t->timeout_s)
      return "timeout_stopper: " + shown_number(t->timeout_s) + " s since the experiment started";
  return "";
}

}  // namespace tune
