// The placement groups the controller asks the head for, as the live trials' table
// says (tune/tuner/live_trials.hpp): created, waited for, taken back after a head
// restart; the answers go back to the table.
#include "controller_state.hpp"
#include "tune/core/trace.hpp"
#include "tune/cluster/version.hpp"

namespace tune {

namespace {

// After a head restart, how long a group made again waits for the nodes that still hold
// its bundles to join the new head (they reconnect within a few seconds).
constexpr std::chrono::milliseconds claim_wait{8000};

// The placement group every trial of the experiment asks for, with this id (empty: the
// head names it), or the trial's own (the hooks' resources_fn).
// With auto-packing the trial's bundle has its measured share (again: the one it had).
wire::wire_group_spec group_spec(controller_actor self, const std::string& id, const std::string& trial, bool again) {
  auto& opt = self->state.setup.options;
  wire::wire_group_spec spec;
  spec.id = id;
  spec.experiment = self->state.run_key;  // the user's share is split fairly between their experiments
  if (auto r = self->state.records.find(trial); r != self->state.records.end() && r->second.request) {
    spec.strategy = std::string{to_string(r->second.request->strat)};
    for (auto& b : r->second.request->bundles) spec.bundles.push_back(wire::to_wire_request(b));
    return spec;
  }
  spec.strategy = std::string{to_string(opt.strat)};
  for (auto& b : opt.bundles) spec.bundles.push_back(wire::to_wire_request(b));
  if (self->state.packing && !opt.bundles.empty()) {
    auto b = opt.bundles[0];
    b.set_gpu(packing_share(self, trial, again));
    spec.bundles[0] = wire::to_wire_request(b);
  }
  return spec;
}

void request_failed(controller_actor self, const std::string& id, uint64_t attempt, const std::string& why) {
  self->state.table.on_request_failed(id, attempt, why);
  drain(self);
}

}  // namespace

void create_group(controller_actor self, const live::create_group& c) {
  auto& st = self->state;
  auto spec = group_spec(self, c.group, c.trial, c.claim);
  if (c.claim) spec.claim_wait_ms = claim_wait.count();  // its node may hold it still
  spec.avoid = c.avoid;
  // Answered once placed, for most groups at once: no separate wait (a round trip to
  // the head less per trial). A group still pending then is waited for as before.
  spec.ready_wait_ms = std::min(st.setup.options.group_timeout, st.setup.request_timeout / 2).count();
  // Where its checkpoint is staged, if it restarts from one (no fetch there).
  if (auto r = st.records.find(c.trial); r != st.records.end() && !r->second.standby_node.empty())
    spec.prefer = {r->second.standby_node};
  if (step_tracing()) trace_step("create_sent", st.on_wire(c.trial));
  self->request(st.setup.head, st.setup.request_timeout, wire::pg_create_atom::value, st.setup.token, version(), spec)
      .then(
          [self, c](wire::pg_create_atom, std::string& group, std::string& state, std::string& reason) {
            if (step_tracing()) trace_step("create_answered", self->state.on_wire(c.trial));
            if (state == "pending") on_waiting(self, c.trial, reason);
            self->state.table.on_group_created(c.trial, c.attempt, {true, group, state, reason});
            drain(self);
          },
          [self, c](caf::error& err) {
            if (!wire::is_refusal(err))
              return request_failed(self, c.trial, c.attempt, "create placement group: " + describe(self->system(), err));
            if (step_tracing()) trace_step("create_answered", self->state.on_wire(c.trial));
            std::string code = wire::refusal_code(err) == errc::already_exists ? "exists" : "";
            self->state.table.on_group_created(c.trial, c.attempt, {false, "", code, wire::refusal_reason(err)});
            drain(self);
          });
}

void wait_group(controller_actor self, const live::wait_group& c) {
  auto& st = self->state;
  auto wait = st.setup.options.group_timeout;
  self->request(st.setup.head, wait + st.setup.request_timeout, wire::pg_wait_atom::value, st.setup.token, c.group,
                int64_t{wait.count()})
      .then(
          [self, c](wire::pg_wait_atom, bool ready, const std::string& state, const std::string& why) {
            self->state.table.on_group_wait(c.trial, c.attempt, ready, state, why);
            drain(self);
          },
          [self, c](caf::error& err) {
            if (!wire::is_refusal(err))
              return request_failed(self, c.trial, c.attempt, "wait for " + c.group + ": " + describe(self->system(), err));
            auto state = wire::refusal_code(err) == errc::not_found ? "unknown" : "";
            self->state.table.on_group_wait(c.trial, c.attempt, false, state, wire::refusal_reason(err));
            drain(self);
          });
}

// Its first message is what lets its events through (wire.hpp, route_atom): `received`
// tells it which of its messages came here (it sends again what follows). Through the
// head, which relays it to the trial's node: a restarted head's nodes have no route to
// this process until a message from it comes through.
void greet(controller_actor self, const std::string& trial, const std::string& group, uint64_t received) {
  auto& st = self->state;
  self->send(st.setup.head, wire::route_atom::value, st.setup.token, group, uint32_t{0}, st.on_wire(trial), received);
}

namespace {

// Its group is back (or it was refused: the trial's actor may still be where it was):
// its actor greeted through the head.
void greet_again(controller_actor self, const std::string& trial) {
  auto& st = self->state;
  auto* t = st.table.find(trial);
  if (t && !t->group.empty()) greet(self, trial, t->group, t->received);
}

}  // namespace

// After a head restart: the running trial's group made again with its id (its node
// still holds its bundles: adopted as they are), then its actor greeted.
void retake_group(controller_actor self, const live::retake_group& c) {
  auto& st = self->state;
  auto spec = group_spec(self, c.group, c.trial, true);
  spec.claim_wait_ms = claim_wait.count();  // until its node has joined the new head
  self->request(st.setup.head, st.setup.request_timeout, wire::pg_create_atom::value, st.setup.token, version(), spec)
      .then(
          [self, c](wire::pg_create_atom, std::string&, std::string&, std::string&) { greet_again(self, c.trial); },
          [self, c](caf::error& err) {
            if (wire::refusal_code(err) != errc::already_exists)
              (void)self->state.setup.store->add_event(c.trial, "group_not_taken_back",
                                                       {{"error", describe(self->system(), err)}});
            if (wire::is_refusal(err)) greet_again(self, c.trial);
          });
}

}  // namespace tune
