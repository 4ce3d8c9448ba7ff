// The groups actor passes on, for a group's user, what concerns a trial in a bundle to
// the node that holds it (nodes take these only from the head's process): the trial's
// start, a standby copy of its checkpoint (to a named node, or to where the group would
// go were its nodes gone), and a client's greeting for it.
#include <nlohmann/json.hpp>

#include "groups_state.hpp"

namespace tune {
namespace groups_impl {

namespace {

// Where a trial of `spec` starts, for `owner` (the requesting client): the node of its
// bundle and the bundle's site there, or why it cannot start there.
struct start_site {
  node_iface node;
  bundle_site site;
  std::string refusal;
};

start_site site_for_start(groups_actor self, const std::string& user, const wire::wire_trial_spec& spec,
                          const caf::actor& owner) {
  auto& st = self->state;
  auto no = [](const std::string& why) { return start_site{{}, {}, why}; };
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
  if (auto o = st.owner_of.find(spec.group); o != st.owner_of.end() && o->second.address() != owner.address())
    return no("placement group " + spec.group +
              " belongs to another client: only the client that created it starts trials in it");
  if (spec.gang.world_size > 0 && (spec.gang.world_size != g->site.size() || spec.gang.rank != spec.bundle))
    return no("a gang's worker of rank " + std::to_string(spec.gang.rank) + " of " + std::to_string(spec.gang.world_size) +
              " runs in bundle " + std::to_string(spec.gang.rank) + " of a group of " + std::to_string(spec.gang.world_size) +
              " bundles; " + spec.group + " has " + std::to_string(g->site.size()) + " and this is bundle " +
              std::to_string(spec.bundle));
  return {n->second, *site, {}};
}

// A gang's ranks on nodes, from where the group's bundles are (rank r in bundle r):
// the nodes numbered in bundle order, each worker's place among those on its node.
void fill_ranks(wire::wire_gang& gang, const group_table::group& g) {
  std::vector<node_id> order;
  gang.local_rank = gang.local_world_size = 0;
  const node_id& mine = g.site[gang.rank]->node;
  for (uint32_t b = 0; b < g.site.size(); ++b) {
    const node_id& n = g.site[b]->node;
    if (std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
    if (n != mine) continue;
    if (b < gang.rank) ++gang.local_rank;
    ++gang.local_world_size;
  }
  gang.node_rank = static_cast<uint32_t>(std::find(order.begin(), order.end(), mine) - order.begin());
  gang.nodes = static_cast<uint32_t>(order.size());
}

// A trial in one of a group's bundles: passed on to the node that holds it, which
// answers the client.
caf::result<wire::trial_start_atom, wire::wire_trial_started, caf::actor> start_in_group(groups_actor self, const std::string& user, const wire::wire_trial_spec& spec,
                                         const caf::actor& server) {
  auto& st = self->state;
  auto owner = caf::actor_cast<caf::actor>(self->current_sender());
  auto where = site_for_start(self, user, spec, owner);
  if (!where.refusal.empty()) return wire::start_refusal(where.refusal);
  // Asked from here (nodes take trials only from the head's process), for the client,
  // who owns the trial. Fetching a large program can take a while.
  auto rp = self->make_response_promise();
  auto answered = std::make_shared<bool>(false);
  uint64_t n_start = st.next_start++;
  node_id node = where.site.node;
  st.starting[node][n_start] = {answered, rp, spec.trial_id};
  auto answer = [self, rp, answered, node, n_start](auto reply) mutable {
    if (*answered) return;  // the node was declared dead first
    *answered = true;
    if (auto it = self->state.starting.find(node); it != self->state.starting.end()) {
      it->second.erase(n_start);
      if (it->second.empty()) self->state.starting.erase(it);
    }
    rp.deliver(std::move(reply));
  };
  auto forwarded = spec;
  forwarded.account = st.table.account_of(user);  // never what the client says
  if (spec.gang.world_size > 0) fill_ranks(forwarded.gang, *st.table.find(spec.group));
  self->request(where.node, std::chrono::minutes(10), wire::trial_start_atom::value, forwarded,
                node_key(spec.group, spec.bundle, where.site).group, spec.bundle, server, owner)
      .then([answer](wire::trial_start_atom, wire::wire_trial_started& started, caf::actor& trial) mutable {
              answer(wire::start_answer(std::move(started), std::move(trial)));
            },
            [answer](caf::error& err) mutable {
              answer(wire::is_refusal(err) ? err : wire::start_refusal("the node did not start the trial: " + to_string(err)));
            });
  return rp;
}

// A standby copy of a trial's checkpoint (wire.hpp, stage_atom): to the node named, or
// to where the trial's group would go were its current nodes gone.
caf::result<wire::stage_atom, std::string> stage_copy(groups_actor self, const std::string& user,
                                                     const std::string& group, const std::string& node,
                                                     const std::string& trial, const std::string& manifest,
                                                     const std::string& program_sha, uint64_t program_size,
                                                     const caf::actor& server) {
  auto& st = self->state;
  auto no = [](const std::string& why) { return wire::refusal(errc::invalid_argument, why); };
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
  auto rp = self->make_response_promise<wire::stage_atom, std::string>();
  self->request(n->second, std::chrono::minutes(2), wire::stage_atom::value, user + "/" + trial, manifest, program_sha,
                program_size, server)
      .then([rp, to](wire::stage_atom, const std::string&) mutable { rp.deliver(wire::stage_atom::value, to); },
            [rp, to](caf::error& err) mutable { rp.deliver(wire::relayed(err, "node " + to + ": ")); });
  return rp;
}

// A client's greeting for its trial, to the node of the trial's bundle; its sender
// stays the client (the node's process learns the route back to it from it).
void route_greeting(groups_actor self, const std::string& user, const std::string& group, uint32_t bundle,
                    const std::string& trial, uint64_t received) {
  auto& st = self->state;
  auto* g = st.table.find(group);
  if (!g || bundle >= g->site.size() || !g->site[bundle] || !not_theirs(self, user, group, "greet").empty()) return;
  auto n = st.nodes.find(g->site[bundle]->node);
  if (n == st.nodes.end()) return;
  self->delegate(n->second, wire::route_atom::value, trial, received);
}

}  // namespace

groups_trials_iface::behavior_type trial_handlers(groups_actor self) {
  return {
      [self](wire::trial_start_atom, const std::string& user, const wire::wire_trial_spec& spec,
             const caf::actor& server) { return start_in_group(self, user, spec, server); },
      [self](wire::stage_atom, const std::string& user, const std::string& group, const std::string& node,
             const std::string& trial, const std::string& manifest, const std::string& program_sha, uint64_t program_size,
             const caf::actor& server) {
        return stage_copy(self, user, group, node, trial, manifest, program_sha, program_size, server);
      },
      [self](wire::route_atom, const std::string& user, const std::string& group, uint32_t bundle, const std::string& trial,
             uint64_t received) { route_greeting(self, user, group, bundle, trial, received); },
  };
}

}  // namespace groups_impl
}  // namespace tune
