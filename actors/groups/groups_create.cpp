// The groups actor's clients' groups: a create checked and made (placed by the table, or
// adopted from the orphans an earlier head left on the nodes), answered at once or once
// placed (ready_wait_ms) or once its holders joined again (claim_wait_ms); waits,
// removals and reads, each only by the group's user or the admin.
#include "groups_state.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"

namespace tune {
namespace groups_impl {

namespace {

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

status create_refusal(const std::string& why) { return {errc::invalid_argument, why}; }

// A group made: its id, state and why it is in it.
struct created {
  std::string id, state, reason;
};
using create_answer = caf::result<wire::pg_create_atom, std::string, std::string, std::string>;

// A create's spec, checked, into `spec` (all but its id: name_group): empty, or why not.
std::string read_spec(const wire::wire_group_spec& w, const std::string& user, group_spec& spec) {
  auto strat = parse_strategy(w.strategy.empty() ? "PACK" : w.strategy);
  if (!strat) return strat.error().message();
  spec.strat = *strat;
  spec.user = user;  // its quota, priority and share (docs/users.md)
  if (w.bundles.empty()) return "a placement group needs at least one bundle";
  if (w.bundles.size() > 4096) return "a placement group has at most 4096 bundles";
  spec.avoid = w.avoid;
  if (w.prefer.size() > 16) return "a placement group prefers at most 16 nodes";
  spec.prefer = w.prefer;
  if (w.experiment.size() > 128) return "an experiment key has at most 128 characters";
  spec.experiment = w.experiment;
  for (size_t i = 0; i < w.bundles.size(); ++i) {
    auto r = wire::request_from_wire(w.bundles[i]);
    if (!r) return "bundle " + std::to_string(i) + ": " + r.error().message();
    spec.bundles.push_back(*r);
  }
  return {};
}

// The new group's id: the head's next one, or the one asked for, when `user` may make
// it (again: a removed or infeasible group of that id is forgotten). The create's
// refusal, or ok.
status name_group(groups_actor self, const wire::wire_group_spec& w, const std::string& user, group_spec& spec) {
  auto& st = self->state;
  if (w.id.empty()) {
    spec.id = "pg-" + st.id_prefix + "-" + std::to_string(st.next_id++);
    return status::ok();
  }
  if (auto ok = check_group_id(w.id); !ok) return create_refusal(ok.message());
  spec.id = w.id;
  auto* old = st.table.find(spec.id);
  if (!old) return status::ok();
  if (auto why = not_theirs(self, user, spec.id, "make it again"); !why.empty()) return create_refusal(why);
  if (old->state != group_state::removed && old->state != group_state::infeasible)
    return {errc::already_exists, "placement group " + spec.id + " exists already (" +
                                      std::string{to_string(old->state)} + "); remove it first or choose another id"};
  st.table.forget(spec.id);
  return status::ok();
}

// Bundles nodes kept through a head restart are claimed only by their owner (their node
// key says whose) or the admin: why `user` may not make group `id`, or empty.
std::string held_for_another(groups_actor self, const std::string& id, const std::string& user) {
  for (auto& [key, o] : self->state.orphans) {
    std::string key_id, key_owner;
    uint64_t attempt = 0;
    if (parse_node_key(key, key_id, attempt, &key_owner) && key_id == id && !key_owner.empty() && key_owner != user &&
        user != "admin")
      return "placement group " + id + " is held on node " + o.node + " for " + key_owner +
             " since before the head restarted: only " + key_owner + " or the cluster's admin can claim it";
  }
  return {};
}

// Group `id` is `user`'s; unless detached, it is `owner`'s too (watched: its groups go
// with it).
void register_owner(groups_actor self, const std::string& id, bool detached, const caf::actor& owner,
                    const std::string& user) {
  auto& st = self->state;
  st.user_of[id] = user;
  if (detached || !owner) st.detached.insert(id);
  if (!detached && owner) {
    auto& mine = st.groups_of[owner.address()];
    if (mine.empty()) self->monitor(owner);
    mine.insert(id);
    st.owner_of[id] = caf::actor_cast<group_owner_iface>(owner);
  }
}

expected<created> create(groups_actor self, const wire::wire_group_spec& w, caf::actor owner, const std::string& user) {
  auto& st = self->state;
  group_spec spec;
  if (auto why = read_spec(w, user, spec); !why.empty()) return create_refusal(why);
  if (auto named = name_group(self, w, user, spec); !named) return named;
  if (auto why = held_for_another(self, spec.id, user); !why.empty()) return create_refusal(why);
  auto now = self->clock().now();
  std::string id = spec.id;
  if (!claim_orphans(self, spec)) {
    auto made = st.table.create(std::move(spec), st.view, now);
    if (!made) return create_refusal(made.error().message());
  }
  register_owner(self, id, w.detached, owner, user);
  flush(self);
  auto* g = st.table.find(id);
  return created{id, std::string{to_string(g->state)}, g->reason};
}

create_answer answer(const expected<created>& c) {
  if (!c) return wire::refusal(c.error().code(), c.error().message());
  return {wire::pg_create_atom::value, c->id, c->state, c->reason};
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

create_answer create_request(groups_actor self, const std::string& user, const wire::wire_group_spec& spec) {
  auto& st = self->state;
  auto owner = caf::actor_cast<caf::actor>(self->current_sender());
  if (spec.claim_wait_ms > 0 && !spec.id.empty() && !st.table.find(spec.id) && !orphans_complete(self, spec)) {
    auto rp = self->make_response_promise();
    auto wait = std::chrono::milliseconds(std::min<int64_t>(spec.claim_wait_ms, 60000));
    st.claim_waits.push_back({spec, owner, user, rp, self->clock().now() + wait});
    return rp;
  }
  auto made = create(self, spec, owner, user);
  if (spec.ready_wait_ms <= 0 || !made) return answer(made);
  // Made: answered now if it is placed, cannot be, or must wait (its owner hears why
  // at once: another program on the card, a full cluster), else once its nodes have
  // said yes (or at the deadline).
  const auto& id = made->id;
  auto* g = st.table.find(id);
  if (!g || g->state != group_state::preparing) return answer(made);
  auto rp = self->make_response_promise();
  auto wait = std::chrono::milliseconds(std::min<int64_t>(spec.ready_wait_ms, 60000));
  st.waiters[id].push_back({rp, self->clock().now() + wait, true});
  return rp;
}

// Group `id` when `user` may `what` it; else why not (another user's group is not found
// for them either: the refusal names its owner).
caf::expected<const group_table::group*> their_group(groups_actor self, const std::string& user, const std::string& id,
                                                     const char* what) {
  const auto* g = self->state.table.find(id);
  if (!g) return wire::refusal(errc::not_found, "no placement group " + id);
  if (auto why = not_theirs(self, user, id, what); !why.empty()) return wire::refusal(errc::not_found, why);
  return g;
}

caf::result<wire::pg_wait_atom, bool, std::string, std::string> wait_request(groups_actor self, const std::string& user,
                                                                            const std::string& id, int64_t timeout_ms) {
  if (auto g = their_group(self, user, id, "wait for"); !g) return std::move(g.error());
  if (timeout_ms < 0) return wire::refusal(errc::invalid_argument, "a negative timeout; give 0 to ask without waiting");
  auto rp = self->make_response_promise();
  auto wait = std::chrono::milliseconds(std::min<int64_t>(timeout_ms, int64_t{24} * 3600 * 1000));
  self->state.waiters[id].push_back({rp, self->clock().now() + wait});
  answer_waiters(self);
  return rp;
}

caf::result<wire::pg_remove_atom, std::string> remove_request(groups_actor self, const std::string& user,
                                                             const std::string& id) {
  auto g = their_group(self, user, id, "remove");
  if (!g) return std::move(g.error());
  if ((*g)->state == group_state::removed) return {wire::pg_remove_atom::value, std::string{"already removed"}};
  remove_group(self, id);
  flush(self);
  return {wire::pg_remove_atom::value, std::string{"removed"}};
}

caf::result<wire::pg_get_atom, std::string> get_request(groups_actor self, const std::string& user,
                                                       const std::string& id) {
  auto g = their_group(self, user, id, "read");
  if (!g) return std::move(g.error());
  return {wire::pg_get_atom::value, json_text(group_json(self, **g, self->clock().now()))};
}

}  // namespace

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
    auto made = create(self, c.spec, c.owner, c.user);
    if (made) c.rp.deliver(wire::pg_create_atom::value, made->id, made->state, made->reason);
    else c.rp.deliver(wire::refusal(made.error().code(), made.error().message()));
  }
}

groups_create_iface::behavior_type create_handlers(groups_actor self) {
  return {
      [self](wire::pg_create_atom, const std::string& user, const wire::wire_group_spec& spec) {
        return create_request(self, user, spec);
      },
      [self](wire::pg_wait_atom, const std::string& user, const std::string& id, int64_t timeout_ms) {
        return wait_request(self, user, id, timeout_ms);
      },
      [self](wire::pg_remove_atom, const std::string& user, const std::string& id) {
        return remove_request(self, user, id);
      },
      [self](wire::pg_get_atom, const std::string& user, const std::string& id) { return get_request(self, user, id); },
  };
}

}  // namespace groups_impl
}  // namespace tune
