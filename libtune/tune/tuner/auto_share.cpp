#include "tune/tuner/auto_share.hpp"

#include <algorithm>
#include <cmath>

#include "tune/core/node_resources.hpp"

namespace tune {

namespace {

quantity share_units(int64_t units) { return quantity::from_units(std::clamp<int64_t>(units, 1, quantity::scale)); }

std::string percent(int util) { return util >= 0 ? std::to_string(util) + "%" : "not known"; }

}  // namespace

status check(const auto_share_options& o) {
  auto bad = [](const std::string& what) { return status{errc::invalid_argument, "auto_packing: " + what}; };
  if (!(o.margin >= 0) || o.margin > 10) return bad("margin must be between 0 and 10 (0.25: a quarter above the peak)");
  if (!(o.probe_share > 0) || o.probe_share > 1) return bad("probe_share must be above 0 and at most 1 (a share of one card)");
  if (!(o.min_share > 0) || o.min_share > 1) return bad("min_share must be above 0 and at most 1 (e.g. 0.0625: 16 trials per card)");
  if (o.min_share < 1.0 / quantity::scale) return bad("min_share is below 0.0001, the finest share");
  if (o.probe_trials < 1) return bad("probe_trials must be at least 1");
  if (o.probe_results < 1) return bad("probe_results must be at least 1");
  return status::ok();
}

auto_share::auto_share(auto_share_options o, int64_t card_memory)
    : opt_(o),
      card_memory_(card_memory),
      probe_share_(share_units(std::llround(o.probe_share * quantity::scale))),
      share_(probe_share_) {}

quantity auto_share::share_holding(int64_t bytes) const {
  const auto need = static_cast<double>(bytes) * (1 + opt_.margin);
  const auto floor_units = static_cast<int64_t>(std::ceil(opt_.min_share * quantity::scale - 1e-9));
  if (card_memory_ <= 0 || need >= static_cast<double>(card_memory_)) return quantity::whole(1);
  // The most trials whose quotas (share x card) each hold `need`: k = card / need, the
  // share 1/k in whole units, fewer trials if rounding took the quota below the need.
  auto k = static_cast<int64_t>(std::floor(static_cast<double>(card_memory_) / std::max(need, 1.0)));
  k = std::clamp<int64_t>(k, 1, quantity::scale);
  int64_t units = quantity::scale / k;
  while (k > 1 && static_cast<double>(node_resources::implied_card_memory(quantity::from_units(units), card_memory_)) < need)
    units = quantity::scale / --k;
  return share_units(std::max(units, floor_units));
}

quantity auto_share::share_for(const std::string& id, std::optional<auto_decision>* probe_event) {
  auto s = pick(id, probe_event);
  last_[id] = s;
  return s;
}

quantity auto_share::pick(const std::string& id, std::optional<auto_decision>* probe_event) {
  if (auto o = own_.find(id); o != own_.end()) return o->second;
  if (sized_) return share_;
  if (!probes_.count(id) && static_cast<int>(probes_.size()) < opt_.probe_trials) {
    probes_[id] = 0;
    if (probe_event)
      *probe_event = auto_decision{
          "auto_probe",
          {{"share", probe_share_.to_double()}, {"probe", static_cast<int>(probes_.size())}, {"of", opt_.probe_trials}},
          "auto-packing: " + id + " probes on " + probe_share_.to_string() + " of a GPU"};
  }
  return probe_share_;
}

quantity auto_share::current(const std::string& id) const {
  auto l = last_.find(id);
  return l != last_.end() ? l->second : share_;
}

std::optional<auto_decision> auto_share::decide(const std::string& why) {
  sized_ = true;
  if (peak_ <= 0) {
    share_ = probe_share_;
    return auto_decision{"auto_share",
                         {{"share", share_.to_double()}, {"peak", 0}, {"why", why + "; no GPU memory was measured: the probe share kept"}},
                         "auto-packing: no GPU memory measured (" + why + "): every trial keeps " + share_.to_string() +
                             " of a GPU"};
  }
  share_ = share_holding(peak_);
  const auto per_card = quantity::scale / share_.units();
  const auto quota = node_resources::implied_card_memory(share_, card_memory_);
  return auto_decision{"auto_share",
                       {{"share", share_.to_double()},
                        {"trials_per_card", per_card},
                        {"peak", peak_},
                        {"margin", opt_.margin},
                        {"quota", quota},
                        {"util", util_},
                        {"min_share", opt_.min_share},
                        {"why", why}},
                       "auto-packing: peak " + format_bytes(peak_) + " + " + std::to_string(std::lround(opt_.margin * 100)) +
                           "% -> " + share_.to_string() + " of a GPU (" + format_bytes(quota) + ", " +
                           std::to_string(per_card) + " per card); probe SM utilisation " + percent(util_)};
}

std::optional<auto_decision> auto_share::on_result(const std::string& id, int64_t peak, int util) {
  peak_ = std::max(peak_, peak);
  auto p = probes_.find(id);
  if (sized_ || p == probes_.end()) return std::nullopt;
  if (util >= 0) util_ = util;
  if (peak > 0 && p->second >= 0) ++p->second;
  if (static_cast<int>(probes_.size()) < opt_.probe_trials) return std::nullopt;
  for (auto& [pid, n] : probes_)
    if (n >= 0 && n < opt_.probe_results) return std::nullopt;
  return decide("measured over " + std::to_string(opt_.probe_results) + " result(s) of " + std::to_string(probes_.size()) +
                " probe(s)");
}

std::optional<auto_decision> auto_share::on_ended(const std::string& id, int64_t peak, int util) {
  peak_ = std::max(peak_, peak);
  auto p = probes_.find(id);
  if (sized_ || p == probes_.end()) return std::nullopt;
  if (util >= 0) util_ = util;
  p->second = -1;
  // Every probe has ended or been measured: decide (a probe that ended early says what
  // it used; if none said, the probe share is kept).
  for (auto& [pid, n] : probes_)
    if (n >= 0 && n < opt_.probe_results) return std::nullopt;
  return decide("the probe(s) ended");
}

std::optional<auto_decision> auto_share::on_outgrown(const std::string& id, bool over_quota, bool ok, int64_t peak,
                                                     int64_t quota) {
  if (ok || quota <= 0) return std::nullopt;
  const bool near_quota = peak > 0 && static_cast<double>(peak) >= 0.9 * static_cast<double>(quota);
  if (!over_quota && !near_quota) return std::nullopt;
  auto l = last_.find(id);
  auto old = l != last_.end() ? l->second : share_;
  if (old >= quantity::whole(1)) return std::nullopt;  // a whole card was not enough
  // Its peak is at least its quota (the audit saw it over, or the driver refused more).
  auto needed = std::max(peak, quota + 1);
  auto next = std::max(share_holding(needed), share_holding(peak_));
  if (next <= old) next = std::min(quantity::whole(1), quantity::from_units(old.units() * 2));
  peak_ = std::max(peak_, needed);
  own_[id] = next;
  if (sized_ && next > share_) share_ = next;  // later trials need as much
  ++outgrown_;
  auto how = over_quota ? "the GPU audit found it over its quota" : "it failed with its peak within 10% of its quota";
  return auto_decision{"auto_outgrown",
                       {{"share", next.to_double()},
                        {"was", old.to_double()},
                        {"peak", peak},
                        {"quota", quota},
                        {"why", how}},
                       "auto-packing: " + id + " outgrew " + old.to_string() + " of a GPU (" + how + ", peak " +
                           format_bytes(peak) + " of " + format_bytes(quota) + "): restarted from its checkpoint on " +
                           next.to_string()};
}

nlohmann::json auto_share::summary() const {
  nlohmann::json j{{"phase", sized_ ? "sized" : "probing"},
                   {"share", share_.to_double()},
                   {"probe_share", probe_share_.to_double()},
                   {"margin", opt_.margin},
                   {"min_share", opt_.min_share},
                   {"peak", peak_},
                   {"outgrown", outgrown_}};
  if (sized_) j["trials_per_card"] = quantity::scale / share_.units();
  if (util_ >= 0) j["util"] = util_;
  return j;
}

int trials_that_fit(const nlohmann::json& status, const std::vector<resource_set>& bundles) {
  if (bundles.empty()) return 0;
  double per_node_total = 0;
  for (auto& n : status.value("nodes", nlohmann::json::array())) {
    if (!n.value("alive", false)) continue;
    auto total = n.contains("resources") ? n["resources"].value("total", nlohmann::json::object()) : nlohmann::json::object();
    for (auto& b : bundles) {
      auto want = nlohmann::json::parse(b.to_json());
      double fit = 1e9;
      for (auto& [name, amount] : want.items()) {
        if (!amount.is_number() || amount.get<double>() <= 0) continue;
        double have = total.contains(name) && total[name].is_number() ? total[name].get<double>() : 0;
        fit = std::min(fit, std::floor(have / amount.get<double>() + 1e-9));
      }
      per_node_total += fit >= 1e9 ? 1 : fit;
    }
  }
  return static_cast<int>(per_node_total / static_cast<double>(bundles.size()));
}

int64_t smallest_card_memory(const nlohmann::json& status) {
  int64_t least = 0;
  for (auto& n : status.value("nodes", nlohmann::json::array())) {
    if (!n.value("alive", false)) continue;
    for (auto& g : n.value("gpus", nlohmann::json::array())) {
      auto m = g.value("memory_total", int64_t{0});
      if (m > 0 && (least == 0 || m < least)) least = m;
    }
  }
  return least;
}

}  // namespace tune
