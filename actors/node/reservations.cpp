// The node's reservations for placement groups (prepare, commit, abort from the head;
// prepares that are never committed expire) and the machine's card claims, through
// which nodes of other clusters on this machine never give one card twice
// (docs/gpu-sharing.md).
#include <unistd.h>

#include <algorithm>

#include "audit.hpp"
#include "log.hpp"
#include "node_state.hpp"
#include "tune/trial/others.hpp"

namespace tune {
namespace node_impl {

namespace {

// How often the node looks at the other nodes' claims on this machine's cards.
constexpr auto claims_period = std::chrono::milliseconds(200);

// What this node's bundles (prepared or committed) hold on each card other programs can
// use too: its claims.
std::map<std::string, card_claim> own_claims(const reservation_table& table) {
  std::map<std::string, card_claim> out;
  auto& gpus = table.resources().gpus();
  for (auto& h : table.holdings())
    for (auto& g : h.alloc.gpus) {
      if (!shared_card(gpus[g.card])) continue;
      auto& c = out[gpus[g.card].uuid];
      c.units += g.share.units();
      c.memory += g.memory;
    }
  return out;
}

// Under the cards' locks (`held`'s, or taken by write()): every write to a card's folder is.
void write_claims(node_actor self, const card_claims::lock* held = nullptr) {
  auto& st = self->state;
  if (!st.claims) return;
  if (auto s = st.claims->write(own_claims(st.table), held); !s) log_line("card claims: " + s.message());
}

// What other programs hold on the cards, from the other nodes' `claims` and the audit's
// foreign processes, into the reservation table; the head hears of a change at once.
void set_others(node_actor self, const std::vector<claimer>& claims) {
  auto& st = self->state;
  auto& gpus = st.table.resources().gpus();
  auto before = st.table.resources().others();
  auto now = others_on_cards(gpus, claims, st.foreign, st.opt.others);
  if (auto s = st.table.set_others(now); !s) return log_line("what others hold on the cards: " + s.message());
  auto& after = st.table.resources().others();
  if (after == before) return;
  for (size_t c = 0; c < gpus.size(); ++c) {
    bool was = !before.empty() && before[c].any(), is = !after.empty() && after[c].any();
    if (is && (!was || before[c].holds_card != after[c].holds_card))
      log_line("GPU " + std::to_string(gpus[c].index) + " (" + gpus[c].uuid + "): in use by another program: " + after[c].who +
               (after[c].holds_card ? " (not given whole)" : ""));
    else if (was && !is)
      log_line("GPU " + std::to_string(gpus[c].index) + " (" + gpus[c].uuid + "): no other program on it any more");
  }
  if (st.joined && st.head) send_heartbeat(self);
}

// Releases reach the claims within this long, many in one write (a prepare in between
// writes them at once): a claim that lasts a little longer only makes another cluster
// wait a little longer, never share a card.
constexpr auto release_delay = std::chrono::milliseconds(20);

void release_claims(node_actor self) {
  auto& st = self->state;
  if (!st.claims || st.release_due) return;
  st.release_due = true;
  self->delayed_send(self, release_delay, claims_write_atom::value);
}

// The shared cards of an allocation, by UUID.
std::vector<std::string> shared_cards_of(node_actor self, const allocation& a) {
  auto& gpus = self->state.table.resources().gpus();
  std::vector<std::string> out;
  for (auto& g : a.gpus)
    if (shared_card(gpus[g.card])) out.push_back(gpus[g.card].uuid);
  return out;
}

// A bundle reserved on this node's reservation table with what the other nodes on the
// machine claim taken into account: under the locks of the cards it will likely take
// (the head's choice, else where this node's rules put it), their claims read again; if
// it went to other cards after all, taken back and decided again under every card's lock.
// Nodes on disjoint cards never wait for each other; the node's claims are written before
// the locks go.
expected<allocation> prepare_claimed(node_actor self, const bundle_key& key, const resource_set& request,
                                     const allocation& preferred) {
  auto& st = self->state;
  auto now = self->clock().now();
  if (!st.claims || request.gpu().is_zero()) return st.table.prepare(key, request, preferred, now);
  auto& res = st.table.resources();
  std::vector<std::string> cards;
  if (res.follows_rules(request, preferred)) cards = shared_cards_of(self, preferred);
  else if (auto guess = res.plan(request)) cards = shared_cards_of(self, *guess);
  bool all = cards.empty();
  auto held = all ? st.claims->hold_all() : st.claims->hold(cards);
  look_at_claims(self, all ? &st.claims->cards() : &cards);
  auto taken = st.table.prepare(key, request, preferred, now);
  if (taken && !all)
    for (auto& uuid : shared_cards_of(self, *taken))
      if (std::find(cards.begin(), cards.end(), uuid) == cards.end()) {
        st.table.abort(key);
        {
          auto none = std::move(held);  // let go first: never two sets of locks at once
        }
        auto every = st.claims->hold_all();
        look_at_claims(self);
        taken = st.table.prepare(key, request, preferred, now);
        if (taken) write_claims(self, &every);
        return taken;
      }
  if (taken) write_claims(self, &held);
  return taken;
}

void expire_prepares(node_actor self) {
  auto& st = self->state;
  auto gone = st.table.expire(self->clock().now(), st.opt.prepare_ttl);
  for (auto& k : gone)
    log_line("released bundle " + k.to_string() + ": prepared but never committed within " +
             std::to_string(st.opt.prepare_ttl.count()) + " ms");
  if (!gone.empty()) release_claims(self);
  self->delayed_send(self, st.opt.prepare_ttl / 4, wire::expire_atom::value);
}

// Prepares come as plain messages and are answered with plain messages (no request
// timeouts: the head times attempts out itself).
void prepare(node_actor self, const std::string& key, uint32_t bundle, const wire::wire_request& req,
             const wire::wire_alloc& preferred) {
  auto& st = self->state;
  auto to = caf::actor_cast<groups_nodes_iface>(self->current_sender());  // the placement-group actor
  if (!to) return;
  auto answer = [&](bool ok, wire::wire_alloc taken, std::string why) {
    self->send(to, wire::prepare_atom::value, st.opt.node_id, key, bundle, ok, std::move(taken), std::move(why),
               st.table.version());
  };
  if (!from_head(self)) return answer(false, {}, "only the head this node joined may reserve here");
  auto request = wire::request_from_wire(req);
  if (!request) return answer(false, {}, request.error().message());
  auto pref = wire::alloc_from_wire(preferred, st.table.resources());
  // Two clusters on one machine never give one card twice (prepare_claimed).
  auto taken = prepare_claimed(self, {key, bundle}, *request, pref ? *pref : allocation{});
  if (!taken) return answer(false, {}, taken.error().message());
  answer(true, wire::to_wire(*taken), {});
}

}  // namespace

// The other nodes' claims (the folders of `fresh` read again when they changed; all: the
// node's every card).
void look_at_claims(node_actor self, const std::vector<std::string>* fresh) {
  auto& st = self->state;
  if (!st.claims) return set_others(self, {});
  set_others(self, fresh ? st.claims->others(*fresh) : st.claims->others());
}

// The machine's card claims, for a node with cards other programs can use.
void open_claims(node_actor self) {
  auto& st = self->state;
  auto& gpus = st.opt.resources.gpus();
  if (std::none_of(gpus.begin(), gpus.end(), [](const gpu_instance& g) { return shared_card(g); })) return;
  claimer me;
  me.node = st.opt.node_id;
  me.pid = ::getpid();
  me.started = process_start_time(me.pid);
  me.uid = ::getuid();
  me.user = user_name(me.uid);
  if (st.opt.contain && st.opt.contain->caps().cgroup) me.cgroup = st.opt.contain->caps().trials_path;
  auto dir = st.opt.claims_dir.empty() ? shared_dir() + "/gpus" : st.opt.claims_dir;
  std::vector<std::string> uuids;
  for (auto& g : gpus)
    if (shared_card(g)) uuids.push_back(g.uuid);
  auto c = card_claims::open(dir, std::move(me), uuids);
  if (!c) {
    log_line("card claims off (" + c.error().message() + "): another libtune cluster on this machine may give these "
             "cards too until a trial of its shows on them");
    return;
  }
  st.claims = std::move(*c);
  log_line("card claims in " + st.claims->dir() + ": other libtune nodes on this machine see what this one gives");
  self->send(self, claims_tick_atom::value);
}

node_reservations_iface::behavior_type reservations(node_actor self) {
  return {
      [self](wire::expire_atom) { expire_prepares(self); },
      [self](wire::prepare_atom, const std::string& key, uint32_t bundle, const wire::wire_request& req,
             const wire::wire_alloc& preferred) { prepare(self, key, bundle, req, preferred); },
      // A commit is answered only when it fails.
      [self](wire::commit_atom, const std::string& key, uint32_t bundle) {
        auto& st = self->state;
        auto to = caf::actor_cast<groups_nodes_iface>(self->current_sender());  // the placement-group actor
        auto done = from_head(self) ? st.table.commit({key, bundle})
                                    : status{errc::invalid_argument, "only the head this node joined may commit here"};
        if (!done && to) self->send(to, wire::commit_atom::value, st.opt.node_id, key, bundle, false, done.message());
      },
      [self](wire::abort_atom, const std::string& key, uint32_t bundle) {
        if (!from_head(self)) return;
        self->state.table.abort({key, bundle});
        release_claims(self);
        // A trial in that bundle has no reservation any more: it must not go on using
        // the cards (the head may have given them, or this trial, to someone else).
        self->state.plan->on_released({key, bundle});
        carry_out(self);
      },
      // The GPU audit's processes on the cards that are none of this node's trials.
      [self](audit_foreign_atom, std::vector<foreign_process>& list) {
        auto& st = self->state;
        if (!st.audit || self->current_sender() != st.audit.address()) return;
        st.foreign = std::move(list);
        look_at_claims(self);
      },
      [self](claims_write_atom) {
        self->state.release_due = false;
        write_claims(self);
      },
      [self](claims_tick_atom) {
        look_at_claims(self);
        self->delayed_send(self, claims_period, claims_tick_atom::value);
      },
  };
}

}  // namespace node_impl
}  // namespace tune
