// The placement-group actor behind the head, on CAF's deterministic scheduler, against
// scripted nodes: real reservation tables whose answers the test controls (yes, no,
// silence, late), so that every phase interleaving is stepped through on purpose.
#include <gtest/gtest.h>

#include <caf/scheduler/test_coordinator.hpp>
#include <nlohmann/json.hpp>
#include <optional>

#include "client/client.hpp"
#include "head/head.hpp"
#include "tune/cluster/groups.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "deterministic.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
const std::string token = "0123456789abcdef0123456789abcdef";
constexpr int64_t GiB = int64_t{1} << 30;

// How a scripted node answers prepares.
enum class answer { yes, no, silent };

struct script {
  answer prepare = answer::yes;
  bool commit_ok = true;
  int prepares = 0, commits = 0, aborts = 0;
  struct late {
    caf::actor to;
    bundle_key key;
    allocation alloc;
  };
  std::vector<late> held_back;  // silent prepares, to answer late
  reservation_table table{node_resources{}};
};

node_resources machine(const std::string& id, int gpus) {
  resource_set host;
  host.set_cpu(quantity::whole(16)).set_memory(64 * GiB);
  return *node_resources::make(host, logical_gpus(id, gpus, 16 * GiB));
}

using beat_atom = wire::beat_atom;

// A node that joins the head and answers as its script says.
caf::behavior scripted_node(caf::event_based_actor* self, caf::actor head, std::string id,
                            std::shared_ptr<script> s) {
  auto ad = wire::make_ad(id, "host-" + id, "10.0.0.9", s->table.resources());
  ad.version = version();
  ad.holdings = wire::holdings_of(s->table);
  ad.holdings_version = s->table.version();
  self->request(head, caf::infinite, wire::join_atom::value, token, ad)
      .then([](wire::join_atom, const std::string&) {}, [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  auto reply = [self, id, s](const caf::actor& to, const std::string& key, uint32_t bundle, bool ok,
                             wire::wire_alloc taken, std::string why) {
    self->send(to, wire::prepare_atom::value, id, key, bundle, ok, std::move(taken), std::move(why), s->table.version());
  };
  return {
      [self, s, reply](wire::prepare_atom, const std::string& key, uint32_t bundle, const wire::wire_request& req,
                       const wire::wire_alloc& pref) {
        ++s->prepares;
        auto to = caf::actor_cast<caf::actor>(self->current_sender());
        auto request = *wire::request_from_wire(req);
        auto preferred = wire::alloc_from_wire(pref, s->table.resources());
        if (s->prepare == answer::no) return reply(to, key, bundle, false, {}, "scripted no");
        auto taken = s->table.prepare({key, bundle}, request, preferred ? *preferred : allocation{},
                                      self->clock().now());
        if (!taken) return reply(to, key, bundle, false, {}, taken.error().message());
        if (s->prepare == answer::silent) {
          s->held_back.push_back({to, bundle_key{key, bundle}, *taken});
          return;
        }
        reply(to, key, bundle, true, wire::to_wire(*taken), {});
      },
      [self, id, s](wire::commit_atom, const std::string& key, uint32_t bundle) {
        ++s->commits;
        auto st = s->commit_ok ? s->table.commit({key, bundle}) : status{errc::not_found, "scripted no"};
        if (!st)
          self->send(caf::actor_cast<caf::actor>(self->current_sender()), wire::commit_atom::value, id, key, bundle,
                     false, st.message());
      },
      [s](wire::abort_atom, const std::string& key, uint32_t bundle) {
        ++s->aborts;
        s->table.abort({key, bundle});
      },
      // The test asks for a heartbeat: what the node holds.
      [self, head, id, s](beat_atom, uint64_t) {
        self->send(head, wire::heartbeat_atom::value, token, id, s->table.version(),
                   wire::to_wire(s->table.resources().availability()), wire::holdings_of(s->table));
      },
      // The test answers the held-back prepares (late).
      [s, reply](wire::retry_atom) {
        for (auto& h : s->held_back) reply(h.to, h.key.group, h.key.bundle, true, wire::to_wire(h.alloc), {});
        s->held_back.clear();
      },
  };
}

struct GroupsActorTest : ::testing::Test {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::actor head = spawn_head(sys, {token, "test:6380", wire::heartbeat_timeout, groups_options{}});
  std::map<std::string, std::pair<caf::actor, std::shared_ptr<script>>> nodes;
  std::optional<caf::scoped_actor> client_actor;

  void SetUp() override {
    sched.run();
    client_actor.emplace(sys);
  }
  void TearDown() override {
    client_actor.reset();
    for (auto& [id, n] : nodes) caf::anon_send_exit(n.first, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
    sched.run();
  }

  std::shared_ptr<script> add_node(const std::string& id, int gpus, std::vector<wire::wire_hold> held = {}) {
    auto s = std::make_shared<script>();
    s->table = reservation_table{machine(id, gpus)};
    for (auto& h : held) {
      auto r = *wire::request_from_wire(h.request);
      auto a = *wire::alloc_from_wire(h.alloc, s->table.resources());
      EXPECT_TRUE(s->table.prepare({h.key, h.bundle}, r, a, {}));
      if (h.committed) {
        EXPECT_TRUE(s->table.commit({h.key, h.bundle}));
      }
    }
    auto a = sys.spawn(scripted_node, head, id, s);
    nodes[id] = {a, s};
    sched.run();
    return s;
  }
  void kill_node(const std::string& id) {
    caf::anon_send_exit(nodes.at(id).first, caf::exit_reason::kill);
    nodes.erase(id);
    sched.run();
  }
  void beat(const std::string& id) {
    caf::anon_send(nodes.at(id).first, beat_atom::value, uint64_t{0});
    sched.run();
  }
  // Advances simulated time in 50 ms steps; the scripted nodes heartbeat every 500 ms.
  void pass(std::chrono::milliseconds d) {
    for (auto left = d; left.count() > 0; left -= 50ms) {
      sched.advance_time(std::min(left, 50ms));
      if (++steps % 10 == 0)
        for (auto& [id, n] : nodes) caf::anon_send(n.first, beat_atom::value, uint64_t{0});
      sched.run();
    }
  }
  int steps = 0;

  // A request from the test's client: (true, the reply's elements after the atom), or
  // refused: (false, and the last element the refusal's words); `refusal` keeps it.
  caf::error refusal;
  template <class... Rs, class Atom, class... Ts>
  std::tuple<bool, Rs...> ask(Atom atom, Ts&&... xs) {
    auto& who = *client_actor;
    auto handle = who->request(head, caf::infinite, atom, std::forward<Ts>(xs)...);
    sched.run();
    std::tuple<bool, Rs...> out{};
    handle.receive([&](Atom, Rs&... rs) { out = std::tuple<bool, Rs...>{true, rs...}; },
                   [&](caf::error& err) {
                     if (!wire::is_refusal(err)) ADD_FAILURE() << to_string(err);
                     refusal = err;
                     std::get<sizeof...(Rs)>(out) = wire::refusal_reason(err);
                   });
    return out;
  }

  // (ok, id, state, reason); refused: (false, "", its code, its words)
  using create_reply = std::tuple<bool, std::string, std::string, std::string>;
  create_reply ask_create(const std::string& tok, const std::string& ver, const wire::wire_group_spec& spec) {
    auto out = ask<std::string, std::string, std::string>(wire::pg_create_atom::value, tok, ver, spec);
    if (!std::get<0>(out)) std::get<2>(out) = to_string(wire::refusal_code(refusal));
    return out;
  }
  create_reply create(std::vector<resource_set> bundles, strategy s, std::string id = {}, bool detached = false) {
    wire::wire_group_spec spec{id, std::string{to_string(s)}, {}, detached};
    for (auto& b : bundles) spec.bundles.push_back(wire::to_wire_request(b));
    return ask_create(token, version(), spec);
  }
  nlohmann::json get(const std::string& id) {
    auto [ok, text] = ask<std::string>(wire::pg_get_atom::value, token, id);
    EXPECT_TRUE(ok) << text;
    return ok ? nlohmann::json::parse(text) : nlohmann::json{};
  }
  std::string state(const std::string& id) {
    auto j = get(id);
    return j.is_object() ? j["state"].get<std::string>() : "?";
  }
  bool remove(const std::string& id) {
    return std::get<0>(ask<std::string>(wire::pg_remove_atom::value, token, id));
  }
  // A wait that the test lets run for `wait` of simulated time. (ready, state, reason)
  std::tuple<bool, std::string, std::string> wait_ready(const std::string& id, std::chrono::milliseconds wait) {
    auto& who = *client_actor;
    auto handle = who->request(head, caf::infinite, wire::pg_wait_atom::value, token, id, int64_t{wait.count()});
    sched.run();
    pass(wait + 100ms);
    std::tuple<bool, std::string, std::string> out{false, "no answer", ""};
    handle.receive([&](wire::pg_wait_atom, bool ready, std::string& st,
                       std::string& reason) { out = {ready, st, reason}; },
                   [&](caf::error& err) {
                     if (!wire::is_refusal(err)) ADD_FAILURE() << to_string(err);
                     out = {false, "unknown", wire::refusal_reason(err)};
                   });
    return out;
  }
  static resource_set gpu(double share) { return *resource_set::make({{"gpu", share}}); }
};

TEST_F(GroupsActorTest, CreateWaitGetRemove) {
  auto a = add_node("a", 2);
  auto b = add_node("b", 2);
  auto [ok, id, st, reason] = create({gpu(1), gpu(1)}, strategy::strict_spread);
  ASSERT_TRUE(ok) << reason;
  EXPECT_EQ(id.rfind("pg-", 0), 0u);
  auto [ready, state_now, why] = wait_ready(id, 1000ms);
  EXPECT_TRUE(ready) << state_now << ": " << why;
  auto j = get(id);
  ASSERT_EQ(j["bundles"].size(), 2u);
  EXPECT_NE(j["bundles"][0]["node"], j["bundles"][1]["node"]);
  for (auto& bj : j["bundles"]) {
    EXPECT_EQ(bj["state"], "held");
    ASSERT_EQ(bj["gpus"].size(), 1u);
    EXPECT_EQ(bj["gpus"][0]["uuid"].get<std::string>().rfind("LOGICAL-", 0), 0u);
  }
  auto info = parse_group_info(j.dump());
  ASSERT_TRUE(info) << info.error().message();
  EXPECT_EQ(info->bundles[1].gpus.size(), 1u);
  EXPECT_EQ(a->table.holdings().size(), 1u);
  EXPECT_EQ(b->table.holdings().size(), 1u);
  EXPECT_EQ(a->table.holdings()[0].state, hold_state::committed);
  EXPECT_TRUE(remove(id));
  EXPECT_TRUE(remove(id)) << "removing twice is fine";
  EXPECT_TRUE(a->table.holdings().empty());
  EXPECT_TRUE(b->table.holdings().empty());
  EXPECT_EQ(state(id), "removed");
}

TEST_F(GroupsActorTest, PrepareRefusedOnOneNodeAbortsTheOtherAndRetries) {
  auto a = add_node("a", 1);
  auto b = add_node("b", 1);
  b->prepare = answer::no;
  auto [ok, id, st, reason] = create({gpu(1), gpu(1)}, strategy::strict_spread);
  ASSERT_TRUE(ok);
  EXPECT_EQ(b->prepares, 1);
  EXPECT_EQ(a->aborts, 1) << "a's prepared bundle is released at once";
  EXPECT_TRUE(a->table.holdings().empty());
  EXPECT_EQ(state(id), "pending");
  EXPECT_NE(get(id)["reason"].get<std::string>().find("refused"), std::string::npos);
  b->prepare = answer::yes;
  auto [ready, s2, why] = wait_ready(id, 3000ms);  // the retry after its backoff
  EXPECT_TRUE(ready) << s2 << ": " << why;
  EXPECT_EQ(a->table.holdings().size(), 1u);
  EXPECT_EQ(b->table.holdings().size(), 1u);
}

TEST_F(GroupsActorTest, ANodeDyingBetweenPrepareAndCommit) {
  auto a = add_node("a", 1);
  auto b = add_node("b", 1);
  add_node("c", 1);
  b->prepare = answer::silent;  // b holds the attempt open...
  nodes.at("c").second->prepare = answer::silent;
  auto [ok, id, st, reason] = create({gpu(1), gpu(1)}, strategy::strict_spread);
  ASSERT_TRUE(ok);
  EXPECT_EQ(state(id), "preparing");
  // ...while one of the prepared nodes dies.
  std::string prepared_dead = a->prepares ? "a" : "c";
  std::string other = b->prepares ? "b" : "c";
  ASSERT_NE(prepared_dead, other);
  kill_node(other);  // a silent node dies mid-attempt
  auto left = nodes.begin()->second.second;
  EXPECT_TRUE(left->table.holdings().empty()) << "the surviving node's prepare is aborted";
  add_node("d", 1);
  for (auto& [nid, n] : nodes) n.second->prepare = answer::yes;
  auto [ready, s2, why] = wait_ready(id, 3000ms);
  EXPECT_TRUE(ready) << s2 << ": " << why;
  auto j = get(id);
  for (auto& bj : j["bundles"]) EXPECT_NE(bj["node"], other);
}

TEST_F(GroupsActorTest, LateAnswersAreAbortedAndNothingLeaks) {
  auto a = add_node("a", 1);
  a->prepare = answer::silent;
  auto [ok, id, st, reason] = create({gpu(1)}, strategy::pack);
  ASSERT_TRUE(ok);
  EXPECT_EQ(a->table.holdings().size(), 1u);
  pass(2500ms);  // past the attempt timeout: the head aborts, and tries again
  EXPECT_GE(a->aborts, 1);
  EXPECT_GE(a->prepares, 2);
  EXPECT_EQ(a->table.holdings().size(), 1u) << "only the attempt in flight holds something";
  a->prepare = answer::yes;
  caf::anon_send(nodes.at("a").first, wire::retry_atom::value);  // the late yeses arrive
  sched.run();
  auto [ready, s2, why] = wait_ready(id, 3000ms);
  EXPECT_TRUE(ready) << s2 << ": " << why;
  ASSERT_EQ(a->table.holdings().size(), 1u) << "exactly one reservation: the late one is not counted";
  // A node that keeps something the head did not make (an abort that was lost) is told
  // to release it at its next heartbeat.
  ASSERT_TRUE(a->table.prepare({"ghost/1", 0}, *resource_set::make({{"cpu", 1}}), {}, {}));
  beat("a");
  EXPECT_EQ(a->table.holdings().size(), 1u);
  EXPECT_EQ(a->table.find({"ghost/1", 0}), nullptr);
}

TEST_F(GroupsActorTest, ALostCommitIsFoundByTheHeartbeat) {
  auto a = add_node("a", 1);
  a->commit_ok = false;  // the commit is refused (as if the prepare had expired)
  auto [ok, id, st, reason] = create({gpu(1)}, strategy::pack);
  ASSERT_TRUE(ok);
  a->table.expire(a->table.holdings()[0].since + 1h, 1ms);  // the node dropped it
  a->commit_ok = true;
  auto [ready, s2, why] = wait_ready(id, 3000ms);
  EXPECT_TRUE(ready) << s2 << ": " << why;
  beat("a");
  ASSERT_EQ(a->table.holdings().size(), 1u);
  EXPECT_EQ(a->table.holdings()[0].state, hold_state::committed);
}

TEST_F(GroupsActorTest, RemovalWhilePendingAndWaitersAreTold) {
  add_node("a", 2);
  auto [ok, id, st, reason] = create({gpu(1), gpu(1), gpu(1)}, strategy::pack);
  ASSERT_TRUE(ok);
  EXPECT_EQ(st, "infeasible");
  EXPECT_NE(reason.find("3"), std::string::npos) << reason;
  auto [ready, s1, why1] = wait_ready(id, 0ms);
  EXPECT_FALSE(ready);
  EXPECT_EQ(s1, "infeasible");

  auto [ok2, big, st2, r2] = create({gpu(1), gpu(1)}, strategy::strict_pack, "big");
  ASSERT_TRUE(ok2);
  auto [ok3, waiting, st3, r3] = create({gpu(1), gpu(1)}, strategy::strict_pack, "waiting");
  ASSERT_TRUE(ok3);
  EXPECT_EQ(st3, "pending");
  EXPECT_NE(get("waiting")["reason"].get<std::string>().find("waiting for"), std::string::npos);
  EXPECT_EQ(get("waiting")["bundles"][0]["state"], "waiting");
  auto [ready2, s2, why2] = wait_ready("waiting", 500ms);
  EXPECT_FALSE(ready2);
  EXPECT_NE(why2.find("not ready in time"), std::string::npos) << why2;
  EXPECT_TRUE(remove("waiting"));
  EXPECT_EQ(state("waiting"), "removed");
  EXPECT_EQ(get("waiting")["bundles"][1]["state"], "released");  // not "waiting" any more
  EXPECT_EQ(get(id)["bundles"][0]["state"], "infeasible");
  EXPECT_TRUE(remove("big"));
}

TEST_F(GroupsActorTest, ABundleFreedWakesTheNextGroup) {
  add_node("a", 1);
  auto [ok, first, s1, r1] = create({gpu(1)}, strategy::pack, "first");
  auto [ok2, second, s2, r2] = create({gpu(1)}, strategy::pack, "second");
  EXPECT_EQ(state("first"), "created");
  EXPECT_EQ(state("second"), "pending");
  EXPECT_TRUE(remove("first"));
  EXPECT_EQ(state("second"), "created") << "placed as soon as resources free up";
}

// ready_wait_ms: the create is answered once the group is placed (a tuning controller
// then needs no separate wait), and at once when it is infeasible or has to wait (its
// owner hears why at once: another program on the card, a full cluster).
TEST_F(GroupsActorTest, ACreateIsAnsweredOncePlacedOrAtOnceWhenItMustWait) {
  add_node("a", 1);
  auto ask_create = [&](const std::string& id, int nbundles, int64_t wait_ms) {
    wire::wire_group_spec spec{id, "PACK", {}, false};
    spec.ready_wait_ms = wait_ms;
    for (int i = 0; i < nbundles; ++i) spec.bundles.push_back(wire::to_wire_request(gpu(1)));
    return (*client_actor)->request(head, caf::infinite, wire::pg_create_atom::value, token, version(), spec);
  };
  auto answer = [&](auto& handle) {
    std::tuple<bool, std::string, std::string, std::string> out{false, "", "no answer", ""};
    handle.receive([&](wire::pg_create_atom, std::string& id, std::string& st, std::string& why) {
                     out = {true, id, st, why};
                   },
                   [&](caf::error& err) { ADD_FAILURE() << to_string(err); });
    return out;
  };
  auto first = ask_create("first", 1, 1000);
  sched.run();
  EXPECT_EQ(std::get<2>(answer(first)), "created") << "answered once placed";
  auto second = ask_create("second", 1, 1000);  // the card is held: it waits, and says so at once
  sched.run();
  auto [ok, id, st, why] = answer(second);
  EXPECT_TRUE(ok) << why;
  EXPECT_EQ(id, "second");
  EXPECT_EQ(st, "pending");
  EXPECT_EQ(why, "waiting for 1 free GPU on one node");
  EXPECT_TRUE(remove("first"));
  pass(100ms);
  EXPECT_EQ(state("second"), "created");
  auto wide = ask_create("wide", 2, 1000);  // two cards on a one-card cluster: at once
  sched.run();
  EXPECT_EQ(std::get<2>(answer(wide)), "infeasible");
}

TEST_F(GroupsActorTest, AJoiningNodeWakesAWaitingGroup) {
  add_node("a", 1);
  auto [ok, id, s, r] = create({gpu(1), gpu(1)}, strategy::strict_spread);
  ASSERT_TRUE(ok);
  EXPECT_EQ(s, "infeasible") << "wider than the cluster: it fails at once";
  auto [ok2, id2, s2, r2] = create({gpu(1)}, strategy::pack);
  auto [ok3, id3, s3, r3] = create({gpu(1)}, strategy::pack);
  EXPECT_EQ(state(id3), "pending");
  add_node("b", 1);
  EXPECT_EQ(state(id3), "created");
}

TEST_F(GroupsActorTest, TheOwnerGoingAwayRemovesItsGroups) {
  add_node("a", 2);
  auto owner = std::make_optional<caf::scoped_actor>(sys);
  auto ask_from = [&](caf::scoped_actor& who, std::string id, bool detached) {
    wire::wire_group_spec spec{id, "PACK", {wire::to_wire_request(gpu(1))}, detached};
    auto h = who->request(head, caf::infinite, wire::pg_create_atom::value, token, version(), spec);
    sched.run();
    h.receive([](wire::pg_create_atom, std::string&, std::string&, std::string&) {},
              [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  };
  ask_from(*owner, "owned", false);
  ask_from(*owner, "kept", true);
  EXPECT_EQ(state("owned"), "created");
  owner.reset();  // the owner ends
  sched.run();
  EXPECT_EQ(state("owned"), "removed");
  EXPECT_EQ(state("kept"), "created") << "a detached group outlives its creator";
  EXPECT_EQ(nodes.at("a").second->table.holdings().size(), 1u);
}

TEST_F(GroupsActorTest, OnlyTheOwnerStartsTrialsInItsGroup) {
  add_node("a", 2);
  auto [ok, id, st, reason] = create({gpu(1)}, strategy::pack);
  ASSERT_TRUE(ok) << reason;
  EXPECT_TRUE(std::get<0>(wait_ready(id, 1000ms)));
  caf::scoped_actor other{sys};
  wire::wire_trial_spec spec;
  spec.trial_id = "t1";
  spec.group = id;
  auto h = other->request(head, caf::infinite, wire::trial_start_atom::value, token, spec, caf::actor{});
  sched.run();
  bool answered = false;
  h.receive(
      [&](wire::trial_start_atom, wire::wire_trial_started&, caf::actor&) { ADD_FAILURE() << "it started"; },
      [&](caf::error& e) {
        answered = true;
        auto why = wire::refusal_reason(e);
        EXPECT_NE(why.find("belongs to another client"), std::string::npos) << to_string(e);
      });
  EXPECT_TRUE(answered);
}

TEST_F(GroupsActorTest, ANodeJoiningAgainOverANewConnectionKeepsItsBundles) {
  auto a = add_node("a", 1);
  auto [ok, id, s, r] = create({gpu(1)}, strategy::pack);
  ASSERT_EQ(state(id), "created");
  auto old = nodes.at("a").first;
  nodes["a"].first = sys.spawn(scripted_node, head, std::string{"a"}, a);  // same node, new actor
  sched.run();
  caf::anon_send_exit(old, caf::exit_reason::user_shutdown);
  sched.run();
  beat("a");
  EXPECT_EQ(state(id), "created");
  EXPECT_EQ(a->aborts, 0) << "nothing moved: the node still holds it";
  EXPECT_EQ(a->prepares, 1);
  EXPECT_EQ(a->table.holdings().size(), 1u);
  // A node that comes back holding nothing (it restarted) has its bundles placed again.
  a->table.abort(a->table.holdings()[0].key);
  beat("a");
  pass(200ms);
  EXPECT_EQ(state(id), "created");
  EXPECT_EQ(a->prepares, 2);
  EXPECT_EQ(a->table.holdings().size(), 1u);
}

TEST_F(GroupsActorTest, ANodeLostAfterCommitMovesBundlesAndTellsTheOwner) {
  add_node("a", 1);
  add_node("b", 1);
  auto [ok, id, s, r] = create({gpu(1)}, strategy::pack);
  auto where = get(id)["bundles"][0]["node"].get<std::string>();
  std::string other = where == "a" ? "b" : "a";
  kill_node(where);
  EXPECT_EQ(state(id), "created");
  EXPECT_EQ(get(id)["bundles"][0]["node"], other);
  bool told = false;
  (*client_actor)->receive([&](wire::pg_moved_atom, const std::string& g, const std::vector<uint32_t>& b) {
    told = g == id && b == std::vector<uint32_t>{0};
  }, caf::after(0s) >> [] {});
  EXPECT_TRUE(told);
}

TEST_F(GroupsActorTest, ARestartedHeadAdoptsWhatItsOwnerClaims) {
  // Nodes that held committed bundles for an earlier head join this one.
  auto node = machine("a", 2);
  auto alloc = *node.plan(gpu(1));
  auto held = std::vector<wire::wire_hold>{{"train-7/41", 0, true, wire::to_wire_request(gpu(1)), wire::to_wire(alloc)}};
  auto orphan_alloc = *node.plan(gpu(0.5));
  orphan_alloc.gpus[0].card = 1;
  held.push_back({"gone/41", 0, true, wire::to_wire_request(gpu(0.5)), wire::to_wire(orphan_alloc)});
  held.push_back({"half/41", 0, false, wire::to_wire_request(gpu(0.25)), wire::to_wire(orphan_alloc)});
  auto a = add_node("a", 2, held);
  EXPECT_EQ(a->table.holdings().size(), 2u) << "a prepare of an earlier head is released at once";
  // Nothing is promised twice meanwhile: only half a card is free.
  auto [ok, big, s, r] = create({gpu(1)}, strategy::pack);
  EXPECT_EQ(s, "pending");
  EXPECT_TRUE(remove(big));
  // Its owner claims the group: adopted as it is, no new reservation.
  auto [ok2, id, s2, r2] = create({gpu(1)}, strategy::pack, "train-7");
  ASSERT_TRUE(ok2) << r2;
  EXPECT_EQ(s2, "created");
  EXPECT_EQ(a->prepares, 0);
  // The unclaimed one is released after the grace period.
  pass(61000ms);
  EXPECT_EQ(a->table.holdings().size(), 1u);
  EXPECT_EQ(a->table.find({"gone/41", 0}), nullptr);
}

TEST_F(GroupsActorTest, BadRequestsAreRefusedWithTheReason) {
  add_node("a", 1);
  auto [ok1, i1, s1, r1] = create({}, strategy::pack);
  EXPECT_FALSE(ok1);
  EXPECT_NE(r1.find("at least one bundle"), std::string::npos) << r1;
  auto [ok2, i2, s2, r2] = create({gpu(1)}, strategy::pack, "bad id/with slash");
  EXPECT_FALSE(ok2);
  EXPECT_NE(r2.find("character"), std::string::npos) << r2;
  wire::wire_group_spec spec{"x", "DIAGONAL", {wire::to_wire_request(gpu(1))}, false};
  using reply = create_reply;
  auto create_with = [&](std::string tok, std::string ver) { return ask_create(tok, ver, spec); };
  reply m = create_with(token, version());
  EXPECT_FALSE(std::get<0>(m));
  EXPECT_NE(std::get<3>(m).find("DIAGONAL"), std::string::npos) << std::get<3>(m);
  m = create_with("not-the-token", version());
  EXPECT_FALSE(std::get<0>(m));
  EXPECT_NE(std::get<3>(m).find("token"), std::string::npos);
  m = create_with(token, "0.0.1");
  EXPECT_FALSE(std::get<0>(m));
  EXPECT_NE(std::get<3>(m).find("version"), std::string::npos);
  auto [ok4, i4, s4, r4] = create({gpu(1)}, strategy::pack, "dup");
  auto [ok5, i5, s5, r5] = create({gpu(1)}, strategy::pack, "dup");
  EXPECT_TRUE(ok4);
  EXPECT_FALSE(ok5);
  EXPECT_NE(r5.find("exists already"), std::string::npos);
  EXPECT_EQ(s5, to_string(errc::already_exists));  // the code the controller acts on, not the sentence
  EXPECT_EQ(std::get<2>(m), to_string(errc::invalid_argument));  // other failures carry another code
  EXPECT_FALSE(remove("nope"));
  EXPECT_FALSE(std::get<0>(ask<std::string>(wire::pg_get_atom::value, std::string{"bad"}, std::string{"dup"})));
}

TEST_F(GroupsActorTest, StatusListsGroups) {
  add_node("a", 1);
  create({gpu(1)}, strategy::pack, "one");
  create({gpu(1)}, strategy::pack, "two");
  auto [ok, text] = ask<std::string>(wire::status_atom::value, token, version());
  ASSERT_TRUE(ok) << text;
  auto j = nlohmann::json::parse(text);
  ASSERT_EQ(j["placement_groups"].size(), 2u);
  std::map<std::string, std::string> states;
  for (auto& g : j["placement_groups"]) states[g["id"]] = g["state"];
  EXPECT_EQ(states["one"], "created");
  EXPECT_EQ(states["two"], "pending");
}

}  // namespace
}  // namespace tune
