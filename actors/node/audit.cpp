#include "audit.hpp"

#include <signal.h>
#include <unistd.h>

#include <tuple>

#include "log.hpp"
#include "wire.hpp"
#include "tune/core/quantity.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/trial/audit.hpp"
#include "tune/trial/others.hpp"

namespace tune {

namespace {

struct audit_state {
  audit_options opt;
  std::unique_ptr<gpu_audit> rules;
  std::map<std::string, trial_iface> trials;         // by trial id
  // What each trial actor last heard: now, peak, its mean SM utilisation.
  std::map<std::string, std::tuple<int64_t, int64_t, int>> told;
  // Each trial's SM utilisation samples (percent) since it was added: sum, count.
  std::map<std::string, std::pair<double, int64_t>> util;
  std::vector<wire::wire_card_report> last_report;
  std::string last_error;
  caf::actor_clock::time_point last_sent{};
  std::map<std::string, std::vector<int>> last_pids;  // each trial's processes on cards at the last look
  std::vector<foreign_process> last_foreign;  // what the node last heard of foreign processes
  // Each trial's cards, and the foreign processes seen on them since it was added (those
  // there at its first look are not news).
  std::map<std::string, std::set<std::string>> cards_of;
  std::map<std::string, std::set<int>> seen_beside;
  // Final checks under way (audit_end_atom), by trial.
  struct ending {
    caf::response_promise rp;
    caf::actor_clock::time_point since;
    std::vector<std::string> killed;
    std::set<int> pids;  // what belonged to it
  };
  std::map<std::string, ending> endings;
  static inline const char* name = "tune.audit";
};

using audit_actor = audit_iface::stateful_pointer<audit_state>;

// The report's cards: this node's, with the trials and foreign processes on each.
std::vector<wire::wire_card_report> report_cards(const std::vector<gpu_card_sample>& cards, const audit_result& r,
                                                 const std::set<std::string>& mine) {
  std::vector<wire::wire_card_report> out;
  for (auto& c : cards) {
    if (!mine.count(c.uuid)) continue;
    wire::wire_card_report card{c.index, c.uuid, c.used, c.total, c.util, {}, {}};
    for (auto& [id, use] : r.trials)
      if (auto m = use.memory.find(c.uuid); m != use.memory.end()) card.trials.push_back({id, {}, m->second});
    for (auto& f : r.foreign)
      if (f.uuid == c.uuid) {
        wire::wire_card_foreign foreign{f.pid, f.memory, f.name,
                                        f.uid >= 0 ? user_name(static_cast<uint32_t>(f.uid)) : std::string{}, {}};
        for (auto& [id, use] : r.trials)
          if (use.memory.count(c.uuid)) foreign.beside.push_back(id);
        card.foreign.push_back(std::move(foreign));
      }
    out.push_back(std::move(card));
  }
  return out;
}

// A foreign process new on a card of a trial's, since the trial's first look: the trial
// is told (a note in its record; the process is left alone).
void tell_beside(audit_actor self, const std::vector<foreign_process>& foreign) {
  auto& st = self->state;
  for (auto& [id, cards] : st.cards_of) {
    auto t = st.trials.find(id);
    auto first = !st.seen_beside.count(id);
    auto& seen = st.seen_beside[id];
    for (auto& f : foreign) {
      if (!cards.count(f.uuid) || !seen.insert(f.pid).second || first || t == st.trials.end()) continue;
      auto what = describe_process(f);
      log_line("trial " + id + ": another program appeared on its GPU " + std::to_string(f.card) + " (" + f.uuid +
               "): " + what + " (not this cluster's: left alone)");
      self->send(t->second, audit_foreign_atom::value,
                 wire::wire_beside{f.pid, f.memory, f.card, f.uuid, f.name, what,
                                   f.uid >= 0 ? user_name(static_cast<uint32_t>(f.uid)) : std::string{}});
    }
  }
}

void tick(audit_actor self) {
  auto& st = self->state;
  auto cards = st.opt.lib->sample();
  if (!cards) {
    if (cards.error().message() != st.last_error) log_line("GPU audit: " + cards.error().message());
    st.last_error = cards.error().message();
    return;
  }
  st.last_error.clear();
  auto r = st.rules->check(*cards);
  for (auto& v : r.violations) {
    log_line("trial " + v.trial + ": " + v.message);
    if (auto t = st.trials.find(v.trial); t != st.trials.end())
      self->send(t->second, audit_violation_atom::value, v.message, v.over_quota);
  }
  // The node hears of foreign processes as soon as they change (placement keeps clear).
  if (r.foreign != st.last_foreign) {
    st.last_foreign = r.foreign;
    self->send(st.opt.node, audit_foreign_atom::value, r.foreign);
  }
  tell_beside(self, r.foreign);
  for (auto& [id, use] : r.trials) {
    if (!use.pids.empty()) st.last_pids[id] = use.pids;
    auto t = st.trials.find(id);
    if (t == st.trials.end()) continue;
    auto& u = st.util[id];
    if (use.sm_util >= 0) {
      u.first += use.sm_util;
      ++u.second;
    }
    int util = u.second > 0 ? static_cast<int>(u.first / static_cast<double>(u.second) + 0.5) : -1;
    auto now = std::make_tuple(use.total, use.peak, util);
    if (st.told[id] == now) continue;
    st.told[id] = now;
    self->send(t->second, audit_usage_atom::value, use.total, use.peak, util);
  }
  // The report: at most once a second, and only when it changed.
  auto clock_now = self->clock().now();
  if (clock_now - st.last_sent < std::chrono::seconds(1)) return;
  // (Process names are whatever bytes a program chose: shown, not used, so replaced.)
  auto report = report_cards(*cards, r, st.opt.cards);
  if (report == st.last_report) return;
  st.last_report = report;
  st.last_sent = clock_now;
  self->send(st.opt.node, audit_report_atom::value, std::move(report));
}

// A trial's final check: what of it is still on a card is killed; done when none is.
void final_check(audit_actor self, const std::string& id) {
  auto& st = self->state;
  auto e = st.endings.find(id);
  if (e == st.endings.end()) return;
  auto& end = e->second;
  auto cards = st.opt.lib->sample();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(self->clock().now() - end.since).count();
  std::vector<std::string> still;
  if (cards) {
    // Killed: what the rules still give to the trial now (its cgroup, its keeper's
    // descendants, its group). Waited for: what was the trial's at the last look and
    // NVML still lists (a process that has ended, its memory not yet freed).
    auto r = st.rules->check(*cards);
    std::set<int> now;
    if (auto u = r.trials.find(id); u != r.trials.end()) now.insert(u->second.pids.begin(), u->second.pids.end());
    for (auto& c : *cards)
      for (auto& p : c.processes) {
        if (!end.pids.count(p.pid) && !now.count(p.pid)) continue;
        auto lineage = read_lineage(p.pid);
        std::string what = "pid " + std::to_string(p.pid) + (lineage ? " (" + lineage->name + ")" : "") + " on GPU " +
                           std::to_string(c.index) + (p.memory > 0 ? ", " + format_bytes(p.memory) : "");
        still.push_back(what);
        if (now.count(p.pid) && ::kill(p.pid, SIGKILL) == 0) {  // a process of the trial's that outlived it
          end.killed.push_back(what);
          log_line("trial " + id + ": GPU audit: " + what + " outlived the trial: killed");
        }
      }
  }
  if (still.empty() || waited >= 3000 || !cards) {
    end.rp.deliver(wire::wire_gpu_after{true, cards && still.empty(), end.killed, std::move(still), waited,
                                        cards ? std::string{} : cards.error().message()});
    st.endings.erase(e);
    return;
  }
  self->delayed_send(self, std::chrono::milliseconds(50), audit_recheck_atom::value, id);
}

audit_iface::behavior_type audit(audit_actor self, audit_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.rules = std::make_unique<gpu_audit>(st.opt.cards, std::set<int>{::getpid()});
  auto forget = [self](std::map<std::string, trial_iface>::iterator it) {
    auto& st = self->state;
    st.rules->remove(it->first);
    st.told.erase(it->first);
    st.util.erase(it->first);
    st.last_pids.erase(it->first);
    st.cards_of.erase(it->first);
    st.seen_beside.erase(it->first);
    st.trials.erase(it);
  };
  self->set_down_handler([self, forget](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto it = st.trials.begin(); it != st.trials.end(); ++it)
      if (it->second.address() == dm.source) return forget(it);
  });
  self->send(self, audit_tick_atom::value);
  return {
      [self](audit_end_atom, const std::string& id) -> caf::result<wire::wire_gpu_after> {
        auto& st = self->state;
        if (!st.trials.count(id) || st.endings.count(id)) return wire::wire_gpu_after{true, true, {}, {}, 0, {}};
        auto rp = self->make_response_promise<wire::wire_gpu_after>();
        auto& end = st.endings[id];
        end.rp = rp;
        end.since = self->clock().now();
        if (auto l = st.last_pids.find(id); l != st.last_pids.end()) end.pids.insert(l->second.begin(), l->second.end());
        final_check(self, id);
        return rp;
      },
      [self](audit_recheck_atom, const std::string& id) { final_check(self, id); },
      // A trial whose worker was kept for the next trial (tune/trial/reuse.hpp): no
      // longer audited, nothing killed; its processes are the next trial's from its add.
      [self, forget](audit_forget_atom, const std::string& id) {
        auto& st = self->state;
        if (auto it = st.trials.find(id); it != st.trials.end() && !st.endings.count(id)) forget(it);
      },
      [self](audit_add_atom, const std::string& id, int pid, int group, const std::string& cgroup,
             const std::vector<wire::wire_count>& quota, const caf::actor& trial) {
        auto& st = self->state;
        audited_trial t{id, pid, group, {}, cgroup};
        for (auto& [uuid, bytes] : quota) t.quota[uuid] = bytes, st.cards_of[id].insert(uuid);
        st.rules->add(std::move(t));
        st.trials[id] = caf::actor_cast<trial_iface>(trial);
        self->monitor(trial);
        tick(self);  // a first look right away
      },
      [self](audit_tick_atom) {
        tick(self);
        self->delayed_send(self, self->state.opt.interval, audit_tick_atom::value);
      },
  };
}

}  // namespace

audit_iface spawn_gpu_audit(caf::local_actor* parent, audit_options opt) {
  return parent->spawn<caf::linked + caf::detached>(audit, std::move(opt));
}

}  // namespace tune
