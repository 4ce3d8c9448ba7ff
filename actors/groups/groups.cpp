#include "groups.hpp"

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/cluster/groups.hpp"
#include <caf/detail/scope_guard.hpp>

namespace tune {

namespace {

using time_point = caf::actor_clock::time_point;

struct waiter {
  caf::response_promise rp;
  time_point deadline;
  bool create = false;  // a create's answer (ready_wait_ms), not a wait's
};

// Its answer: a wait's (ready, state, reason), or a create's (true, id, state, reason).
void deliver(waiter& w, const std::string& id, bool ready, const std::string& state, const std::string& reason) {
  if (w.create) w.rp.deliver(wire::pg_create_atom::value, true, id, state, reason);
  else w.rp.deliver(wire::pg_wait_atom::value, ready, state, reason);
}

// A bundle a node holds for a group this head does not know (it was made by an
// earlier head): kept, booked, until its group is claimed or the grace passes.
struct orphan {
  node_id node;
  resource_set request;
  allocation alloc;
  time_point since;
};

struct groups_state {
  groups_options opt;
  group_table table;
  cluster_view view;
  std::map<node_id, caf::actor> nodes;
  std::map<node_id, std::string> hostname;
  std::map<std::string, caf::actor> owner_of;                 // groups that are not detached
  std::set<std::string> detached;                             // made detached (`tune group create`)
  std::map<caf::actor_addr, std::set<std::string>> groups_of;  // by owner
  std::map<std::string, std::vector<waiter>> waiters;
  std::map<bundle_key, orphan> orphans;
  // Trial starts passed on to a node and not answered yet: a node that dies answers
  // them no more, so they fail when it is declared dead (not when the request times out).
  struct pending_start {
    std::shared_ptr<bool> answered;
    caf::response_promise rp;
    std::string trial;
  };
  std::map<node_id, std::map<uint64_t, pending_start>> starting;
  // Groups made again after a head restart, waiting for the nodes that hold their
  // bundles to join (claim_wait_ms), answered when they are made.
  struct claim_wait {
    wire::wire_group_spec spec;
    caf::actor owner;
    std::string user;
    caf::response_promise rp;
    time_point until;
  };
  std::vector<claim_wait> claim_waits;
  // The user each group belongs to ("admin": the admin token's): only they, or the
  // admin, act on it (docs/users.md).
  std::map<std::string, std::string> user_of;
  // Each running trial's iterations since its last checkpoint, by its group (the head's
  // latest word; preemption's tie-break).
  std::map<std::string, int64_t> since_checkpoint;
  uint64_t next_start = 1;
  std::string id_prefix;
  uint64_t next_id = 1;
  time_point last_forget{};
  static inline const char* name = "tune.groups";
};

using groups_actor = caf::stateful_actor<groups_state>*;

// Attempt numbers start from the wall clock (microseconds), so that a restarted head
// never reuses a key that an earlier head left on a node.
uint64_t first_attempt() {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  return static_cast<uint64_t>(us.count());
}

std::string random_prefix() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string p;
  for (int i = 0; i < 6; ++i) p += hex[rd() % 16];
  return p;
}

status check_group_id(const std::string& id) {
  if (id.size() > 128) return {errc::invalid_argument, "a placement group id has at most 128 characters"};
  for (unsigned char c : id)
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':'))
      return {errc::invalid_argument, "placement group id \"" + id +
                                          "\" has a character other than letters, digits, '-', '_', '.', ':'"};
  return status::ok();
}

void send_all(groups_actor self, std::vector<group_message> msgs);
void flush(groups_actor self);
bool ask_move(groups_actor self, const std::string& group, const std::vector<node_id>& avoid, const std::string& why);

// A higher-priority group waits on a full cluster: the owners of the fewest
// lower-priority groups that make room are asked to move their trials (paused through
// their checkpoints, their groups given back; docs/users.md).
void preempt(groups_actor self) {
  auto& st = self->state;
  auto movable = [&](const std::string& id) { return st.owner_of.count(id) > 0; };
  auto since = [&](const std::string& id) {
    auto it = st.since_checkpoint.find(id);
    return it == st.since_checkpoint.end() ? int64_t{-1} : it->second;
  };
  auto p = st.table.preempt(st.view, self->clock().now(), std::chrono::seconds(30), movable, std::chrono::seconds(5), since);
  if (!p) return;
  std::string names;
  for (auto& v : p->victims) {
    ask_move(self, v, {}, p->reason);
    names += (names.empty() ? "" : ", ") + v;
  }
  log_line("placement group " + p->for_group + " waits on a full cluster: lower-priority group(s) " + names +
           " asked to move (" + p->reason + ")");
}

void send_all(groups_actor self, std::vector<group_message> msgs) {
  auto& st = self->state;
  for (auto& m : msgs) {
    auto it = st.nodes.find(m.node);
    if (it == st.nodes.end()) continue;  // a lost node: nobody to tell
    switch (m.what) {
      // Plain messages both ways: attempts are timed out by the tick (expire), and a
      // lost commit is found by the node's next heartbeat (reconcile).
      case group_message::kind::prepare:
        self->send(it->second, wire::prepare_atom::value, m.key.group, m.key.bundle, wire::to_wire_request(m.request),
                   wire::to_wire(m.preferred));
        break;
      case group_message::kind::commit:
        self->send(it->second, wire::commit_atom::value, m.key.group, m.key.bundle);
        break;
      case group_message::kind::abort:
        self->send(it->second, wire::abort_atom::value, m.key.group, m.key.bundle);
        break;
    }
  }
}

void drop_owner(groups_actor self, const std::string& id) {
  auto& st = self->state;
  auto it = st.owner_of.find(id);
  if (it == st.owner_of.end()) return;
  auto g = st.groups_of.find(it->second.address());
  if (g != st.groups_of.end()) {
    g->second.erase(id);
    if (g->second.empty()) st.groups_of.erase(g);
  }
  st.owner_of.erase(it);
}

// Answers the clients waiting for groups that are created or have failed.
void answer_waiters(groups_actor self) {
  auto& st = self->state;
  for (auto it = st.waiters.begin(); it != st.waiters.end();) {
    auto* g = st.table.find(it->first);
    bool ready = g && g->state == group_state::created;
    bool failed = !g || g->state == group_state::infeasible || g->state == group_state::removed;
    // A create's answer also says when the group has to wait (a prepare refused): why.
    bool waits = g && g->state == group_state::pending && !g->reason.empty();
    if (!ready && !failed && !waits) {
      ++it;
      continue;
    }
    std::string state{g ? to_string(g->state) : "unknown"};
    std::string reason = g ? g->reason : "the placement group was forgotten";
    auto& list = it->second;
    std::erase_if(list, [&](waiter& w) {
      if (!ready && !failed && !w.create) return false;
      deliver(w, it->first, ready, state, reason);
      return true;
    });
    it = list.empty() ? st.waiters.erase(it) : std::next(it);
  }
}

void flush(groups_actor self) {
  auto& st = self->state;
  send_all(self, st.table.schedule(st.view, self->clock().now()));
  preempt(self);
  for (auto& moved : st.table.take_moved()) {
    std::string list;
    for (auto b : moved.bundles) list += (list.empty() ? "" : ", ") + std::to_string(b);
    log_line("placement group " + moved.group + ": bundles " + list + " were placed again after a node loss");
    auto it = st.owner_of.find(moved.group);
    if (it != st.owner_of.end()) self->send(it->second, wire::pg_moved_atom::value, moved.group, moved.bundles);
  }
  answer_waiters(self);
}

void remove_group(groups_actor self, const std::string& id) {
  auto& st = self->state;
  send_all(self, st.table.remove(id, st.view, self->clock().now()));
  drop_owner(self, id);
}

void release_orphan(groups_actor self, std::map<bundle_key, orphan>::iterator it, bool tell_node) {
  auto& st = self->state;
  if (st.view.find(it->second.node)) (void)st.view.release(it->second.node, it->second.alloc);
  auto n = st.nodes.find(it->second.node);
  if (tell_node && n != st.nodes.end())
    self->send(n->second, wire::abort_atom::value, it->first.group, it->first.bundle);
  st.orphans.erase(it);
}

// What a node holds: keep the orphans it still holds, adopt new ones when allowed,
// and reconcile the rest with the table.
void take_holdings(groups_actor self, const node_id& node, const std::vector<wire::wire_hold>& holds, uint64_t version,
                   bool adopt) {
  auto& st = self->state;
  auto* res = st.view.find(node);
  if (!res) return;
  auto now = self->clock().now();
  std::vector<bundle_key> ours;
  std::set<bundle_key> held;
  for (auto& h : holds) {
    bundle_key key{h.key, h.bundle};
    held.insert(key);
    if (auto o = st.orphans.find(key); o != st.orphans.end() && o->second.node == node) continue;
    std::string id;
    uint64_t attempt = 0;
    if (adopt && h.committed && parse_node_key(key, id, attempt) && !st.table.find(id)) {
      auto request = wire::request_from_wire(h.request);
      auto alloc = wire::alloc_from_wire(h.alloc, *res);
      if (request && alloc && st.view.apply(node, *alloc)) {
        st.orphans[key] = {node, *request, *alloc, now};
        log_line("node " + node + " holds bundle " + key.to_string() +
                 " of a placement group this head does not know: kept for its owner to claim");
        continue;
      }
    }
    ours.push_back(std::move(key));
  }
  for (auto it = st.orphans.begin(); it != st.orphans.end();) {
    auto next = std::next(it);
    if (it->second.node == node && !held.count(it->first)) release_orphan(self, it, false);
    it = next;
  }
  send_all(self, st.table.reconcile(node, ours, st.view, now, version));
}

void node_down(groups_actor self, const node_id& id) {
  auto& st = self->state;
  if (!st.view.find(id)) return;
  std::erase_if(st.orphans, [&](const auto& o) { return o.second.node == id; });
  (void)st.view.remove_node(id);
  st.nodes.erase(id);
  if (auto it = st.starting.find(id); it != st.starting.end()) {
    for (auto& [n, p] : it->second) {
      if (*p.answered) continue;
      *p.answered = true;
      p.rp.deliver(wire::start_answer(false, "node " + id + " died before trial " + p.trial + " started"));
    }
    st.starting.erase(it);
  }
  send_all(self, st.table.node_lost(id, st.view, self->clock().now()));
}

bool same_node(const node_resources& a, const node_resources& b) {
  return a.total() == b.total() && a.gpus() == b.gpus();
}

// Claims the orphans of group `id` for a new group of the same id: adopted when they
// are exactly its bundles, else released.
bool claim_orphans(groups_actor self, const group_spec& spec) {
  auto& st = self->state;
  std::vector<std::map<bundle_key, orphan>::iterator> mine;
  for (auto it = st.orphans.begin(); it != st.orphans.end(); ++it) {
    std::string id;
    uint64_t attempt = 0;
    if (parse_node_key(it->first, id, attempt) && id == spec.id) mine.push_back(it);
  }
  if (mine.empty()) return false;
  std::vector<std::optional<bundle_site>> sites(spec.bundles.size());
  bool match = mine.size() == spec.bundles.size();
  for (auto it : mine) {
    std::string id;
    uint64_t attempt = 0;
    std::string key_owner;
    parse_node_key(it->first, id, attempt, &key_owner);
    auto b = it->first.bundle;
    if (!match || b >= sites.size() || sites[b] || !(it->second.request == spec.bundles[b])) {
      match = false;
      break;
    }
    sites[b] = bundle_site{it->second.node, it->second.alloc, attempt};
    sites[b]->owner = key_owner;  // the node's key keeps it, whoever claims the group
  }
  if (!match) {
    for (auto it : mine) release_orphan(self, it, true);
    return false;
  }
  std::vector<bundle_site> list;
  for (auto& s : sites) list.push_back(*s);
  if (!st.table.adopt(spec, std::move(list), self->clock().now())) {
    for (auto it : mine) release_orphan(self, it, true);
    return false;
  }
  for (auto it : mine) st.orphans.erase(it);
  log_line("placement group " + spec.id + " was claimed by its owner: adopted as held");
  return true;
}

nlohmann::json group_json(groups_actor self, const group_table::group& g, time_point now) {
  auto& st = self->state;
  auto secs = [&](time_point t) { return std::chrono::duration<double>(now - t).count(); };
  nlohmann::json bundles = nlohmann::json::array();
  for (uint32_t b = 0; b < g.spec.bundles.size(); ++b) {
    nlohmann::json j{{"index", b}, {"request", g.spec.bundles[b].to_string()}};
    auto& site = g.site[b];
    bool placing = std::find(g.placing.begin(), g.placing.end(), b) != g.placing.end();
    if (!site) {
      // Not held: waiting for room, or never again (the group is gone or can never fit).
      j["state"] = g.state == group_state::removed      ? "released"
                   : g.state == group_state::infeasible ? "infeasible"
                                                        : "waiting";
      j["node"] = nullptr;
    } else {
      j["state"] = placing ? "preparing" : "held";
      j["node"] = site->node;
      auto h = st.hostname.find(site->node);
      j["hostname"] = h == st.hostname.end() ? "" : h->second;
      j["host"] = site->alloc.host.to_string();
      nlohmann::json gpus = nlohmann::json::array();
      auto* n = st.view.find(site->node);
      for (auto& grant : site->alloc.gpus) {
        nlohmann::json gj{{"card", grant.card}, {"share", grant.share.to_double()}, {"memory", grant.memory}};
        if (n && grant.card < n->gpus().size()) {
          auto& card = n->gpus()[grant.card];
          gj["index"] = card.index;
          gj["uuid"] = card.uuid;
          gj["pci_bus_id"] = card.pci_bus_id;
          gj["logical"] = card.logical;
        }
        gpus.push_back(std::move(gj));
      }
      j["gpus"] = std::move(gpus);
    }
    bundles.push_back(std::move(j));
  }
  return {{"id", g.spec.id},
          {"state", to_string(g.state)},
          {"strategy", to_string(g.spec.strat)},
          {"reason", g.reason},
          {"detached", st.detached.count(g.spec.id) > 0},
          {"owner", st.user_of.count(g.spec.id) ? st.user_of.at(g.spec.id) : std::string{}},
          {"experiment", g.spec.experiment},
          {"age_s", secs(g.created)},
          {"in_state_s", secs(g.since)},
          {"bundles", std::move(bundles)}};
}

// Empty when `user` may act on group `id` (its owner, or the admin); else why not,
// naming the owner.
std::string not_theirs(groups_actor self, const std::string& user, const std::string& id, const char* what) {
  auto it = self->state.user_of.find(id);
  if (user == "admin" || it == self->state.user_of.end() || it->second == user) return {};
  return "placement group " + id + " belongs to " + it->second + ": only " + it->second +
         " or the cluster's admin can " + what + " it";
}

caf::message create(groups_actor self, const wire::wire_group_spec& w, caf::actor owner, const std::string& user) {
  auto& st = self->state;
  auto no = [](const std::string& why) {
    return caf::make_message(wire::pg_create_atom::value, false, std::string{}, std::string{}, why);
  };
  group_spec spec;
  auto strat = parse_strategy(w.strategy.empty() ? "PACK" : w.strategy);
  if (!strat) return no(strat.error().message());
  spec.strat = *strat;
  spec.user = user;  // its quota, priority and share (docs/users.md)
  if (w.bundles.empty()) return no("a placement group needs at least one bundle");
  if (w.bundles.size() > 4096) return no("a placement group has at most 4096 bundles");
  spec.avoid = w.avoid;
  if (w.prefer.size() > 16) return no("a placement group prefers at most 16 nodes");
  spec.prefer = w.prefer;
  if (w.experiment.size() > 128) return no("an experiment key has at most 128 characters");
  spec.experiment = w.experiment;
  for (size_t i = 0; i < w.bundles.size(); ++i) {
    auto r = wire::request_from_wire(w.bundles[i]);
    if (!r) return no("bundle " + std::to_string(i) + ": " + r.error().message());
    spec.bundles.push_back(*r);
  }
  if (w.id.empty()) {
    spec.id = "pg-" + st.id_prefix + "-" + std::to_string(st.next_id++);
  } else {
    if (auto ok = check_group_id(w.id); !ok) return no(ok.message());
    spec.id = w.id;
    if (auto* old = st.table.find(spec.id)) {
      if (auto why = not_theirs(self, user, spec.id, "make it again"); !why.empty()) return no(why);
      if (old->state != group_state::removed && old->state != group_state::infeasible)
        return caf::make_message(wire::pg_create_atom::value, false, std::string{}, std::string{"exists"},
                                 "placement group " + spec.id + " exists already (" + std::string{to_string(old->state)} +
                                     "); remove it first or choose another id");
      st.table.forget(spec.id);
    }
  }
  // Bundles nodes kept through a head restart are claimed only by their owner (their
  // node key says whose) or the admin.
  for (auto& [key, o] : st.orphans) {
    std::string id, key_owner;
    uint64_t attempt = 0;
    if (parse_node_key(key, id, attempt, &key_owner) && id == spec.id && !key_owner.empty() && key_owner != user &&
        user != "admin")
      return no("placement group " + spec.id + " is held on node " + o.node + " for " + key_owner +
                " since before the head restarted: only " + key_owner + " or the cluster's admin can claim it");
  }
  auto now = self->clock().now();
  std::string id = spec.id;
  if (!claim_orphans(self, spec)) {
    auto made = st.table.create(std::move(spec), st.view, now);
    if (!made) return no(made.error().message());
  }
  st.user_of[id] = user;
  if (w.detached || !owner) st.detached.insert(id);
  if (!w.detached && owner) {
    auto& mine = st.groups_of[owner.address()];
    if (mine.empty()) self->monitor(owner);
    mine.insert(id);
    st.owner_of[id] = owner;
  }
  flush(self);
  auto* g = st.table.find(id);
  return caf::make_message(wire::pg_create_atom::value, true, id, std::string{to_string(g->state)}, g->reason);
}

// Whether nodes hold every bundle of group `w` (its orphans, as an earlier head left them).
bool orphans_complete(groups_actor self, const wire::wire_group_spec& w) {
  size_t n = 0;
  for (auto& [key, o] : self->state.orphans) {
    std::string id;
    uint64_t attempt = 0;
    n += parse_node_key(key, id, attempt) && id == w.id;
  }
  return n == w.bundles.size();
}

// Groups waiting for their holders: made once every bundle is held again (adopted) or
// their wait is over (placed anew).
void answer_claim_waits(groups_actor self) {
  auto& st = self->state;
  auto now = self->clock().now();
  for (size_t i = 0; i < st.claim_waits.size();) {
    auto& w = st.claim_waits[i];
    if (now < w.until && !orphans_complete(self, w.spec)) {
      ++i;
      continue;
    }
    auto c = std::move(w);
    st.claim_waits.erase(st.claim_waits.begin() + static_cast<std::ptrdiff_t>(i));
    c.rp.deliver(create(self, c.spec, c.owner, c.user));
  }
}

// GPUs a created group holds on each node.
std::map<node_id, double> gpus_by_node(const group_table::group& g) {
  std::map<node_id, double> out;
  for (auto& s : g.site)
    if (s)
      for (auto& grant : s->alloc.gpus) out[s->node] += grant.share.to_double();
  return out;
}

// Asks the owner of `group` to move its trial off `avoid`; false when nobody can (a
// detached group has no owner to ask).
bool ask_move(groups_actor self, const std::string& group, const std::vector<node_id>& avoid, const std::string& why) {
  auto& st = self->state;
  auto o = st.owner_of.find(group);
  if (o == st.owner_of.end()) return false;
  self->send(o->second, wire::pg_move_atom::value, group, avoid, why);
  return true;
}

// Evens the GPU load (allocated / total, per node with GPUs, draining ones aside): moves
// one-node groups from the fullest node to the emptiest while that narrows the gap by
// more than nothing and the gap is over one trial's share; each move asked of its owner.
nlohmann::json rebalance(groups_actor self) {
  auto& st = self->state;
  std::map<node_id, double> cap, used;
  for (auto& [id, node] : st.nodes) {
    auto* res = st.view.find(id);
    if (!res || st.table.draining().count(id)) continue;
    if (!res->gpus().empty()) {
      cap[id] = static_cast<double>(res->gpus().size());
      used[id] = 0;
    }
  }
  // Movable: created, owned, every bundle on one node, holding GPUs.
  struct movable {
    std::string group;
    node_id node;
    double gpu;
  };
  std::vector<movable> list;
  for (auto& [id, g] : st.table.groups()) {
    if (g.state != group_state::created) continue;
    auto by = gpus_by_node(g);
    for (auto& [n, x] : by)
      if (used.count(n)) used[n] += x;
    if (by.size() == 1 && st.owner_of.count(id) && cap.count(by.begin()->first) && by.begin()->second > 0)
      list.push_back({id, by.begin()->first, by.begin()->second});
  }
  nlohmann::json moves = nlohmann::json::array(), load = nlohmann::json::object();
  std::set<std::string> moved;
  for (int round = 0; round < 1000 && cap.size() >= 2; ++round) {
    auto frac = [&](const node_id& n) { return used[n] / cap[n]; };
    node_id hi = cap.begin()->first, lo = hi;
    for (auto& [n, c] : cap) {
      if (frac(n) > frac(hi)) hi = n;
      if (frac(n) < frac(lo)) lo = n;
    }
    // The smallest movable on the fullest node that fits on the emptiest and narrows the gap.
    const movable* best = nullptr;
    for (auto& m : list)
      if (m.node == hi && !moved.count(m.group) && (!best || m.gpu < best->gpu)) best = &m;
    if (!best) break;
    double gap = frac(hi) - frac(lo);
    double after = std::abs((used[hi] - best->gpu) / cap[hi] - (used[lo] + best->gpu) / cap[lo]);
    if (gap <= best->gpu / cap[lo] + 1e-9 || after >= gap - 1e-9 || used[lo] + best->gpu > cap[lo] + 1e-9) break;
    used[hi] -= best->gpu;
    used[lo] += best->gpu;
    moved.insert(best->group);
    std::vector<node_id> avoid;
    for (auto& [n, c] : st.nodes)
      if (n != lo) avoid.push_back(n);
    ask_move(self, best->group, avoid, "rebalance: from " + hi + " to " + lo);
    moves.push_back({{"group", best->group}, {"from", hi}, {"to", lo}, {"gpu", best->gpu}});
  }
  for (auto& [n, c] : cap) load[n] = used[n] / c;
  if (!moves.empty()) log_line("rebalance: " + std::to_string(moves.size()) + " trial(s) asked to move");
  return {{"moves", moves}, {"load", load}};
}

caf::behavior groups(groups_actor self, groups_options opt) {
  auto& st = self->state;
  st.opt = opt;
  st.table = group_table{first_attempt()};
  st.id_prefix = random_prefix();
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.groups_of.find(dm.source);
    if (it == st.groups_of.end()) return;
    auto ids = it->second;
    log_line("the owner of " + std::to_string(ids.size()) + " placement group(s) went away (" +
             to_string(dm.reason) + "): removing them");
    for (auto& id : ids) remove_group(self, id);
    st.groups_of.erase(dm.source);
    flush(self);
  });
  self->delayed_send(self, st.opt.tick, wire::pg_tick_atom::value);
  return {
      [self](wire::node_up_atom, const wire::wire_ad& ad, const caf::actor& node, bool first_join) {
        auto answer_claims = caf::detail::make_scope_guard([self] { answer_claim_waits(self); });
        auto& st = self->state;
        auto res = wire::resources_from_ad(ad);
        if (!res) return;  // the head checked it already
        auto totals = res->emptied();
        if (auto* known = st.view.find(ad.node_id); known && !same_node(*known, totals))
          node_down(self, ad.node_id);  // it came back as another machine
        if (!st.view.find(ad.node_id) && !st.view.add_node(ad.node_id, totals)) return;
        (void)st.view.set_others(ad.node_id, res->others());  // what other programs hold on its cards
        st.nodes[ad.node_id] = node;
        st.hostname[ad.node_id] = ad.hostname;
        take_holdings(self, ad.node_id, ad.holdings, ad.holdings_version, first_join);
        flush(self);
      },
      [self](wire::node_down_atom, const node_id& id) {
        node_down(self, id);
        flush(self);
      },
      [self](wire::holdings_atom, const node_id& id, uint64_t version, const std::vector<wire::wire_hold>& holds) {
        take_holdings(self, id, holds, version, false);
        flush(self);
      },
      // What other programs hold on a node's cards changed: groups that wait for them
      // may fit now (or new ones must go elsewhere).
      [self](wire::others_atom, const node_id& id, const std::vector<wire::wire_others>& others) {
        auto& st = self->state;
        if (!st.view.find(id)) return;
        std::vector<card_others> o;
        for (auto& w : others) o.push_back({w.units, w.memory, w.holds_card, w.who});
        if (auto s = st.view.set_others(id, std::move(o)); !s) log_line("node " + id + ": " + s.message());
        flush(self);
      },
      [self](wire::prepare_atom, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
             const wire::wire_alloc& taken, const std::string& why, uint64_t version) {
        auto& st = self->state;
        auto it = st.nodes.find(node);
        std::string group;
        uint64_t attempt = 0;
        if (it == st.nodes.end() || it->second.address() != self->current_sender() ||
            !parse_node_key({key, bundle}, group, attempt))
          return;  // not from that node's current actor: ignore
        auto* n = st.view.find(node);
        expected<allocation> answer = status{errc::insufficient, why};
        if (ok) answer = wire::alloc_from_wire(taken, *n);
        send_all(self, st.table.on_prepared({key, bundle}, attempt, node, answer, st.view, self->clock().now(), version));
        flush(self);
      },
      [self](wire::commit_atom, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
             const std::string& why) {
        auto& st = self->state;
        auto it = st.nodes.find(node);
        std::string group;
        uint64_t attempt = 0;
        if (ok || it == st.nodes.end() || it->second.address() != self->current_sender() ||
            !parse_node_key({key, bundle}, group, attempt))
          return;
        send_all(self, st.table.on_committed({key, bundle}, attempt, node, status{errc::not_found, why}, st.view,
                                             self->clock().now()));
        flush(self);
      },
      [self](wire::pg_create_atom, const std::string& user, const wire::wire_group_spec& spec) -> caf::result<caf::message> {
        auto& st = self->state;
        auto owner = caf::actor_cast<caf::actor>(self->current_sender());
        if (spec.claim_wait_ms > 0 && !spec.id.empty() && !st.table.find(spec.id) && !orphans_complete(self, spec)) {
          auto rp = self->make_response_promise<caf::message>();
          auto wait = std::chrono::milliseconds(std::min<int64_t>(spec.claim_wait_ms, 60000));
          st.claim_waits.push_back({spec, owner, user, rp, self->clock().now() + wait});
          return rp;
        }
        auto answer = create(self, spec, owner, user);
        if (spec.ready_wait_ms <= 0 || !answer.match_element<bool>(1) || !answer.get_as<bool>(1)) return answer;
        // Made: answered now if it is placed, cannot be, or must wait (its owner hears why
        // at once: another program on the card, a full cluster), else once its nodes have
        // said yes (or at the deadline).
        const auto& id = answer.get_as<std::string>(2);
        auto* g = st.table.find(id);
        if (!g || g->state != group_state::preparing) return answer;
        auto rp = self->make_response_promise();
        auto wait = std::chrono::milliseconds(std::min<int64_t>(spec.ready_wait_ms, 60000));
        st.waiters[id].push_back({rp, self->clock().now() + wait, true});
        return rp;
      },
      // A trial in one of a group's bundles: passed on to the node that holds it, which
      // answers the client.
      [self](wire::trial_start_atom, const std::string& user, const wire::wire_trial_spec& spec, const caf::actor& server)
          -> caf::result<caf::message> {
        auto& st = self->state;
        auto no = [](const std::string& why) { return wire::start_answer(false, why); };
        auto* g = st.table.find(spec.group);
        if (!g) return no("no placement group " + spec.group);
        if (auto why = not_theirs(self, user, spec.group, "start trials in"); !why.empty()) return no(why);
        if (spec.bundle >= g->site.size())
          return no("placement group " + spec.group + " has " + std::to_string(g->site.size()) + " bundles, not " +
                    std::to_string(spec.bundle + 1));
        auto& site = g->site[spec.bundle];
        bool placing = std::find(g->placing.begin(), g->placing.end(), spec.bundle) != g->placing.end();
        if (!site || placing)
          return no("bundle " + std::to_string(spec.bundle) + " of " + spec.group + " is not placed yet (" +
                    std::string{to_string(g->state)} + "): wait until the group is ready");
        auto n = st.nodes.find(site->node);
        if (n == st.nodes.end()) return no("the node of bundle " + std::to_string(spec.bundle) + " is gone");
        // A group a client created is that client's: only it starts trials there (a
        // detached group, made with `tune group create`, is any token holder's).
        auto owner = caf::actor_cast<caf::actor>(self->current_sender());
        if (auto o = st.owner_of.find(spec.group); o != st.owner_of.end() && o->second != owner)
          return no("placement group " + spec.group +
                    " belongs to another client: only the client that created it starts trials in it");
        // Asked from here (nodes take trials only from the head's process), for the client,
        // who owns the trial. Fetching a large program can take a while.
        auto rp = self->make_response_promise<caf::message>();
        auto answered = std::make_shared<bool>(false);
        uint64_t n_start = st.next_start++;
        node_id node = site->node;
        st.starting[node][n_start] = {answered, rp, spec.trial_id};
        auto answer = [self, rp, answered, node, n_start](bool ok, std::string text, caf::actor trial) mutable {
          if (*answered) return;  // the node was declared dead first
          *answered = true;
          if (auto it = self->state.starting.find(node); it != self->state.starting.end()) {
            it->second.erase(n_start);
            if (it->second.empty()) self->state.starting.erase(it);
          }
          rp.deliver(wire::start_answer(ok, std::move(text), std::move(trial)));
        };
        auto forwarded = spec;
        forwarded.account = st.table.account_of(user);  // never what the client says
        self->request(n->second, std::chrono::minutes(10), wire::trial_start_atom::value, forwarded,
                      node_key(spec.group, spec.bundle, *site).group, spec.bundle, server, owner)
            .then([answer](wire::trial_start_atom, bool ok, std::string& text,
                           caf::actor& trial) mutable { answer(ok, std::move(text), std::move(trial)); },
                  [answer](caf::error& err) mutable {
                    answer(false, "the node did not start the trial: " + to_string(err), {});
                  });
        return rp;
      },
      // A standby copy of a trial's checkpoint (wire.hpp, stage_atom): to the node named, or
      // to where the trial's group would go were its current nodes gone.
      [self](wire::stage_atom, const std::string& user, const std::string& group, const std::string& node,
             const std::string& trial, const std::string& manifest, const std::string& program_sha, uint64_t program_size,
             const caf::actor& server) -> caf::result<caf::message> {
        auto& st = self->state;
        auto no = [](const std::string& why) { return caf::make_message(wire::stage_atom::value, false, why); };
        auto m = nlohmann::json::parse(manifest, nullptr, false);
        bool drop = !node.empty() && m.is_object() && m.contains("files") && m["files"].empty();  // the key is the user's own
        auto* g = st.table.find(group);
        if (!drop && !g) return no("no placement group " + group);
        if (auto why = drop ? "" : not_theirs(self, user, group, "stage checkpoints for"); !why.empty()) return no(why);
        node_id to = node;
        if (to.empty()) {
          std::vector<node_id> avoid(st.table.draining().begin(), st.table.draining().end());
          for (auto& site : g->site)
            if (site) avoid.push_back(site->node);
          auto p = place(st.view, g->spec.bundles, g->spec.strat, avoid);
          if (!p || p->result != outcome::placed) return no("no other node would take its group now");
          to = p->bundles[0].node;
        }
        auto n = st.nodes.find(to);
        if (n == st.nodes.end()) return no("no alive node " + to);
        auto rp = self->make_response_promise<caf::message>();
        self->request(n->second, std::chrono::minutes(2), wire::stage_atom::value, user + "/" + trial, manifest,
                      program_sha, program_size, server)
            .then(
                [rp, to](wire::stage_atom, bool ok, const std::string& text) mutable {
                  rp.deliver(caf::make_message(wire::stage_atom::value, ok, ok ? to : "node " + to + ": " + text));
                },
                [rp, to](caf::error& err) mutable {
                  rp.deliver(caf::make_message(wire::stage_atom::value, false, "node " + to + ": " + to_string(err)));
                });
        return rp;
      },
      // A client's greeting for its trial, to the node of the trial's bundle; its sender
      // stays the client (the node's process learns the route back to it from it).
      [self](wire::route_atom, const std::string& user, const std::string& group, uint32_t bundle, const std::string& trial,
             uint64_t received) {
        auto& st = self->state;
        auto* g = st.table.find(group);
        if (!g || bundle >= g->site.size() || !g->site[bundle] || !not_theirs(self, user, group, "greet").empty()) return;
        auto n = st.nodes.find(g->site[bundle]->node);
        if (n == st.nodes.end()) return;
        self->delegate(n->second, wire::route_atom::value, trial, received);
      },
      [self](wire::rebalance_atom) { return caf::make_message(wire::rebalance_atom::value, true, json_text(rebalance(self))); },
      // Drain a node: nothing new placed there, every owned group on it asked to move.
      [self](wire::drain_atom, const node_id& node, bool on) {
        auto& st = self->state;
        if (!st.view.find(node) && on)
          return caf::make_message(wire::drain_atom::value, false, "no alive node " + node);
        st.table.set_draining(node, on);
        nlohmann::json moves = nlohmann::json::array(), stays = nlohmann::json::array();
        if (on) {
          for (auto& [id, g] : st.table.groups()) {
            if (g.state == group_state::removed || g.state == group_state::infeasible) continue;
            bool there = false;
            for (auto& s : g.site) there = there || (s && s->node == node);
            if (!there) continue;
            if (ask_move(self, id, {node}, "node " + node + " is draining")) moves.push_back({{"group", id}, {"from", node}});
            else stays.push_back({{"group", id}, {"why", "detached: nobody owns it to move it; remove it when done"}});
          }
          log_line("node " + node + " is draining: " + std::to_string(moves.size()) + " group(s) asked to move");
        } else {
          log_line("node " + node + " takes new work again");
        }
        flush(self);
        return caf::make_message(wire::drain_atom::value, true, json_text(nlohmann::json{{"moves", moves}, {"stays", stays}}));
      },
      [self](wire::pg_wait_atom, const std::string& user, const std::string& id, int64_t timeout_ms) {
        auto& st = self->state;
        auto rp = self->make_response_promise();
        auto* g = st.table.find(id);
        if (!g) {
          rp.deliver(wire::pg_wait_atom::value, false, std::string{"unknown"}, "no placement group " + id);
        } else if (auto why = not_theirs(self, user, id, "wait for"); !why.empty()) {
          rp.deliver(wire::pg_wait_atom::value, false, std::string{"unknown"}, why);
        } else if (timeout_ms < 0) {
          rp.deliver(wire::pg_wait_atom::value, false, std::string{to_string(g->state)},
                     std::string{"a negative timeout; give 0 to ask without waiting"});
        } else {
          auto wait = std::chrono::milliseconds(std::min<int64_t>(timeout_ms, int64_t{24} * 3600 * 1000));
          st.waiters[id].push_back({rp, self->clock().now() + wait});
          answer_waiters(self);
        }
        return rp;
      },
      [self](wire::pg_remove_atom, const std::string& user, const std::string& id) {
        auto& st = self->state;
        auto* g = st.table.find(id);
        if (!g) return caf::make_message(wire::pg_remove_atom::value, false, "no placement group " + id);
        if (auto why = not_theirs(self, user, id, "remove"); !why.empty())
          return caf::make_message(wire::pg_remove_atom::value, false, why);
        if (g->state == group_state::removed)
          return caf::make_message(wire::pg_remove_atom::value, true, std::string{"already removed"});
        remove_group(self, id);
        flush(self);
        return caf::make_message(wire::pg_remove_atom::value, true, std::string{"removed"});
      },
      [self](wire::pg_get_atom, const std::string& user, const std::string& id) {
        auto& st = self->state;
        auto* g = st.table.find(id);
        if (!g) return caf::make_message(wire::pg_get_atom::value, false, "no placement group " + id);
        if (auto why = not_theirs(self, user, id, "read"); !why.empty())
          return caf::make_message(wire::pg_get_atom::value, false, why);
        return caf::make_message(wire::pg_get_atom::value, true, json_text(group_json(self, *g, self->clock().now())));
      },
      // The users' quotas, priorities and weights, from the head (at its start and after
      // every change): a JSON list of users as tune/cluster/users.hpp's to_json.
      [self](wire::user_atom, const std::string& users) {
        auto j = nlohmann::json::parse(users, nullptr, false);
        if (!j.is_array()) return;
        std::map<std::string, user_limits> limits;
        for (auto& u : j)
          if (auto l = limits_from_json(u); l && u.contains("name") && u["name"].is_string()) limits[u["name"]] = *l;
        self->state.table.set_users(std::move(limits));
        flush(self);
      },
      [self](since_checkpoint_atom, const std::string& json) {
        auto j = nlohmann::json::parse(json, nullptr, false);
        if (!j.is_object()) return;
        auto& since = self->state.since_checkpoint;
        since.clear();
        for (auto& [id, n] : j.items())
          if (n.is_number_integer()) since[id] = n.get<int64_t>();
      },
      [self](wire::pg_list_atom) {
        auto& st = self->state;
        auto now = self->clock().now();
        nlohmann::json groups = nlohmann::json::array(), orphans = nlohmann::json::array();
        for (auto& [id, g] : st.table.groups()) groups.push_back(group_json(self, g, now));
        for (auto& [key, o] : st.orphans)
          orphans.push_back({{"key", key.group},
                             {"bundle", key.bundle},
                             {"node", o.node},
                             {"request", o.request.to_string()},
                             {"age_s", std::chrono::duration<double>(now - o.since).count()}});
        nlohmann::json j{{"groups", std::move(groups)},
                         {"orphans", std::move(orphans)},
                         {"placement_latency", st.table.placement_latency().to_json()}};
        return caf::make_message(wire::pg_list_atom::value, json_text(j));
      },
      [self](wire::pg_tick_atom) {
        auto& st = self->state;
        auto now = self->clock().now();
        send_all(self, st.table.expire(st.view, now, st.opt.attempt_timeout));
        for (auto it = st.waiters.begin(); it != st.waiters.end();) {
          auto* g = st.table.find(it->first);
          std::string state{g ? to_string(g->state) : "unknown"};
          std::string reason = g ? g->reason : "";
          std::erase_if(it->second, [&](waiter& w) {
            if (w.deadline > now) return false;
            deliver(w, it->first, false, state, w.create ? reason : "not ready in time" + (reason.empty() ? "" : ": " + reason));
            return true;
          });
          it = it->second.empty() ? st.waiters.erase(it) : std::next(it);
        }
        answer_claim_waits(self);
        for (auto it = st.orphans.begin(); it != st.orphans.end();) {
          auto next = std::next(it);
          if (now - it->second.since > st.opt.orphan_grace) {
            log_line("released bundle " + it->first.to_string() + " on node " + it->second.node +
                     ": nobody claimed its placement group");
            release_orphan(self, it, true);
          }
          it = next;
        }
        if (now - st.last_forget > std::chrono::seconds(1)) {
          st.table.forget_ended(now, st.opt.keep_ended, st.opt.max_ended);
          std::erase_if(st.user_of, [&](const auto& u) { return !st.table.find(u.first); });
          st.last_forget = now;
        }
        flush(self);
        self->delayed_send(self, st.opt.tick, wire::pg_tick_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_groups(caf::actor_system& sys, groups_options opt) { return sys.spawn(groups, opt); }

}  // namespace tune
