// Auto-packing in the controller: the rules of tune/tuner/auto_share.hpp fed with the
// GPU audit's figures that come with each trial's results and its end; each decision
// is an event in the store, a line on stderr, and the experiment's "auto_packing" on
// the head's board (the dashboard, `tune status`). Once the share is decided the
// experiment may run as many trials as the cluster holds at it (or the user's cap).
#include <iostream>

#include "controller_state.hpp"
#include "tune/cluster/version.hpp"

namespace tune {

namespace {

void record(controller_actor self, const std::string& trial, const auto_decision& d) {
  auto& st = self->state;
  (void)st.setup.store->add_event(trial, d.event, d.body);
  if (st.setup.options.on_progress) std::cerr << "tune: " << d.line << "\n";
  if (st.feed) st.feed->set_info("auto_packing", st.packing->summary());
  board_report(self, true);
}

// The share is decided: as many trials at once as the alive nodes hold at it (the
// head's status), at most the user's cap.
// The cap from the head's status (`why`: why there is none), and on.
void set_cap(controller_actor self, const std::vector<resource_set>& bundles, const nlohmann::json& status,
             const std::string& why) {
  auto& st = self->state;
  if (st.over) return;
  int fit = status.is_object() ? trials_that_fit(status, bundles) : 0;
  if (fit < 1) {  // the head's status said nothing useful: the probes' cap, raised by what ran
    (void)st.setup.store->add_event("", "auto_cap_unknown", {{"error", why.empty() ? "no node holds a trial" : why}});
    fit = std::max(1, st.setup.engine->options().max_concurrent);
  }
  int user = st.setup.options.max_concurrent;
  int cap = user > 0 ? std::min(user, fit) : fit;
  st.setup.engine->set_max_concurrent(cap);
  (void)st.setup.store->add_event("", "auto_concurrency", {{"max_concurrent", cap}, {"fit", fit}});
  advance(self);
}

void raise_cap(controller_actor self) {
  auto& st = self->state;
  auto bundles = st.setup.options.bundles;
  bundles[0].set_gpu(st.packing->share());
  self->request(st.setup.head, st.setup.request_timeout, wire::status_atom::value, st.setup.token, version())
      .then(
          [self, bundles](wire::status_atom, const std::string& text) {
            set_cap(self, bundles, nlohmann::json::parse(text, nullptr, false), "");
          },
          [self, bundles](caf::error& err) {
            if (wire::is_refusal(err)) return set_cap(self, bundles, nullptr, wire::refusal_reason(err));
            // Without the head's answer the experiment goes on at the probes' cap; the
            // next decision (an outgrown trial) asks again.
            (void)self->state.setup.store->add_event("", "auto_cap_unknown",
                                                     {{"error", describe(self->system(), err)}});
          });
}

void decided(controller_actor self, const std::string& trial, std::optional<auto_decision> d) {
  if (!d) return;
  record(self, trial, *d);
  if (d->event == "auto_share") raise_cap(self);
}

}  // namespace

quantity packing_share(controller_actor self, const std::string& trial, bool again) {
  auto& st = self->state;
  if (again) return st.packing->current(trial);
  std::optional<auto_decision> probe;
  auto share = st.packing->share_for(trial, &probe);
  if (probe) record(self, trial, *probe);
  return share;
}

void packing_measured(controller_actor self, const std::string& trial, int64_t peak, int util, size_t results) {
  auto& st = self->state;
  if (!st.packing) return;
  for (size_t i = 0; i < results && !st.over; ++i) decided(self, "", st.packing->on_result(trial, peak, util));
}

bool packing_ended(controller_actor self, const std::string& trial, const wire::wire_trial_end& end) {
  auto& st = self->state;
  if (!st.packing) return false;
  // One that was asked to stop (early stopping) did not outgrow anything; a probe's end,
  // stopped or not, is a measurement all the same.
  auto d = end.stopped ? std::nullopt
                       : st.packing->on_outgrown(trial, end.over_quota, end.ok, end.gpu_memory_peak, end.gpu_memory_quota);
  if (!d) {
    decided(self, "", st.packing->on_ended(trial, end.gpu_memory_peak, end.gpu_util));
    return false;
  }
  d->body["error"] = end.error;
  record(self, trial, *d);
  return true;
}

}  // namespace tune
