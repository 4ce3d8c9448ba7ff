// Preemption benchmark (issue 21): on a full cluster of 64 logical GPUs (8 in-process
// nodes of 8), how long a high-priority user's request for one card waits for it.
// A priority-0 user ("low") holds 64 groups of {gpu: 1}; its client behaves as a tuner
// does when asked to move a trial (pg_move_atom): it gives the group back at once and
// asks for a new one (which waits). A priority-10 user ("high") then asks for {gpu: 1}:
// measured from its create request to its group being ready (the head chose a victim,
// asked its owner, the owner gave the card back, the group was placed and committed on
// the node). Not included: the victim's own pause (its checkpoint and stop) and the
// high trial's start, measured elsewhere (bench_start, users_cluster_test).
// After each sample the high group is removed and the low user's waiting group takes
// the card back, so every sample starts from a full cluster.
// --loopback: the same with a head process and 8 node processes (`tune start`), the
// users added with `tune user add`, the clients here over TCP.
// Last line: one JSON object. Usage: bench_preempt [--samples N] [--loopback]
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "head/head.hpp"
#include "node/node.hpp"
#include "inproc.hpp"
#include "procs.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/users.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "wire.hpp"

using namespace tune;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int node_count = 8, gpus_per_node = 8, cards = node_count * gpus_per_node;
using bench::die;

wire::wire_group_spec one_card() {
  wire::wire_group_spec spec;
  spec.bundles = {wire::to_wire_request(*resource_set::make({{"gpu", 1}}))};
  return spec;
}

// What the low user's client has: groups ready, moves asked.
struct low_books {
  std::atomic<int> ready{0};
  std::atomic<int> moves{0};
  std::atomic<bool> failed{false};
  std::string error;
};

// The low user's client: fills the cluster, and on every move asked gives the group back
// and asks for another (as a tuner pausing a trial through its checkpoint does).
caf::behavior low_client(caf::event_based_actor* self, caf::actor head, std::string token, std::shared_ptr<low_books> books) {
  auto fail = [books](std::string why) {
    books->error = std::move(why);
    books->failed = true;
  };
  auto make = std::make_shared<std::function<void()>>();
  *make = [=] {
    self->request(head, 30s, wire::pg_create_atom::value, token, version(), one_card())
        .then(
            [=](wire::pg_create_atom, const std::string& id, const std::string&, const std::string&) {
              self->request(head, caf::infinite, wire::pg_wait_atom::value, token, id, int64_t{600000})
                  .then([=](wire::pg_wait_atom, bool ready, const std::string&, const std::string&) {
                    if (ready) ++books->ready;
                  },
                        [=](caf::error& e) { fail("low wait: " + to_string(e)); });
            },
            [=](caf::error& e) { fail("low create: " + to_string(e)); });
  };
  for (int i = 0; i < cards; ++i) (*make)();
  return {
      [=](wire::pg_move_atom, const std::string& group, const std::vector<std::string>&, const std::string&) {
        ++books->moves;
        --books->ready;
        self->request(head, 30s, wire::pg_remove_atom::value, token, group)
            .then([=](wire::pg_remove_atom, const std::string&) { (*make)(); },
                  [=](caf::error& e) { fail("low remove: " + to_string(e)); });
      },
  };
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 100;
  bool loopback = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--samples" && i + 1 < argc) samples = std::max(1, std::atoi(argv[++i]));
    else if (a == "--loopback") loopback = true;
    else {
      std::cout << "usage: bench_preempt [--samples N] [--loopback]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  bench::make_scratch("bench_preempt");
  auto token = ensure_token(bench::scratch::token_path);
  if (!token) die(token.error().message());
  wire::config cfg;
  caf::actor_system sys{cfg};
  caf::actor head;
  std::string low_token, high_token;
  std::vector<caf::actor> nodes;
  if (loopback) {
    auto address = bench::start_loopback_cluster(node_count, "--num-gpus " + std::to_string(gpus_per_node));
    for (auto [name, priority] : {std::pair{"low", "0"}, std::pair{"high", "10"}}) {
      auto file = bench::scratch::dir + "/" + name + ".token";
      auto added = bench::run(bench::tune_binary() + " user add " + name + " --priority " + priority + " --address " +
                              address + " --token-file " + bench::scratch::token_path + " --out " + file);
      auto t = read_token(file);
      if (!t) die("tune user add " + std::string{name} + ": " + added);
      (std::string{name} == "low" ? low_token : high_token) = t->token;
    }
    auto port = static_cast<uint16_t>(std::stoi(address.substr(address.find(':') + 1)));
    auto remote = sys.middleman().remote_actor("127.0.0.1", port);
    if (!remote) die("cannot reach the head: " + sys.render(remote.error()));
    head = *remote;
  }
  if (!loopback) {  // the users in the head's own table
    auto store = user_store::open(bench::scratch::dir + "/users.db");
    if (!store) die(store.error().message());
    user_limits low_limits, high_limits;
    high_limits.priority = 10;
    auto low = (*store)->add("low", low_limits);
    auto high = (*store)->add("high", high_limits);
    if (!low || !high) die("cannot add the users");
    low_token = low->token;
    high_token = high->token;
    head_options hopt{token->token, "in-process", wire::heartbeat_timeout, groups_options{}};
    hopt.users = std::shared_ptr<user_store>(std::move(*store));
    head = spawn_head(sys, hopt);
  }
  if (!loopback) nodes = bench::spawn_inproc_nodes(sys, head, token->token, node_count, gpus_per_node);
  auto books = std::make_shared<low_books>();
  auto low_actor = sys.spawn(low_client, head, low_token, books);
  auto full = [&](std::chrono::seconds within) {
    auto until = clock_type::now() + within;
    while (books->ready < cards && !books->failed && clock_type::now() < until) std::this_thread::sleep_for(1ms);
    if (books->failed) die(books->error);
    return books->ready == cards;
  };
  if (!full(30s)) die("the low user did not fill the cluster (" + std::to_string(books->ready) + " of 64 ready)");
  std::printf("cluster full: %d low-priority groups of 1 GPU on %d nodes\n", cards, node_count);
  std::fflush(stdout);
  caf::scoped_actor self{sys};
  std::vector<double> ms;
  int moves_before = books->moves;
  for (int s = 0; s < samples; ++s) {
    auto t0 = clock_type::now();
    std::string id;
    self->request(head, 30s, wire::pg_create_atom::value, high_token, version(), one_card())
        .receive([&](wire::pg_create_atom, std::string& gid, std::string&, std::string&) { id = gid; },
                 [&](caf::error& e) { die("high create: " + to_string(e)); });
    self->request(head, 60s, wire::pg_wait_atom::value, high_token, id, int64_t{30000})
        .receive([&](wire::pg_wait_atom, bool ready, std::string& state, std::string& why) {
                   if (!ready) die("the high group " + id + " was not placed: " + state + " " + why);
                 },
                 [&](caf::error& e) { die("high wait: " + to_string(e)); });
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    self->request(head, 30s, wire::pg_remove_atom::value, high_token, id)
        .receive([&](wire::pg_remove_atom, std::string&) {}, [&](caf::error& e) { die("high remove: " + to_string(e)); });
    if (!full(30s)) die("the low user did not get its card back after sample " + std::to_string(s + 1));
  }
  int moves = books->moves - moves_before;
  std::printf("%d samples: request -> ready p50 %.3f ms, p99 %.3f ms, max %.3f ms; %d victims asked to move (%.2f per request)\n",
              samples, percentile(ms, 0.5), percentile(ms, 0.99), percentile(ms, 1.0), moves,
              static_cast<double>(moves) / samples);
  std::printf("{\"mode\": \"%s\", \"cards\": %d, \"nodes\": %d, \"samples\": %d, \"ready_ms_p50\": %.3f, \"ready_ms_p99\": %.3f, "
              "\"ready_ms_max\": %.3f, \"victims_per_request\": %.2f}\n",
              loopback ? "loopback" : "inproc", cards, node_count, samples, percentile(ms, 0.5), percentile(ms, 0.99), percentile(ms, 1.0),
              static_cast<double>(moves) / samples);
  std::fflush(stdout);
  caf::anon_send_exit(low_actor, caf::exit_reason::user_shutdown);
  for (auto& n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
  if (!loopback) caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  std::exit(0);
}
