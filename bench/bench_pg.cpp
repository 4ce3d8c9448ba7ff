// Placement-group benchmark: create -> ready -> remove pairs per second, and the
// latency from create to ready.
//  (a) inproc: head, placement-group actor and 4 node actors in this process;
//  (b) loopback: a head process and 4 node processes (`tune start`), clients here.
// Each group is two bundles of {gpu: 0.25} with SPREAD on nodes of 8 logical GPUs;
// `clients` groups are in flight at once. Latency is measured apart, with one client
// and one group at a time over loopback (nothing queued in front of it).
// With --users N (issue 21), each run is done twice side by side: with the admin's
// token (one lane) and with N users' tokens (the clients split among them: a lane each,
// the fair-share order and the quota checks on every placement).
// With --simulated (issue 39) the loopback nodes run on simulated cards
// (TUNE_SIMULATED_GPUS; 8 of their own each, out of one view of 32): their GPU audit reads
// the view and every reservation goes through the machine's card claims, as on a GPU
// machine, to weigh what counting other programs costs.
// Last line: one JSON object. Usage: bench_pg [--quick] [--inproc-only] [--users N] [--simulated]
#include <unistd.h>

#include <algorithm>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "head/head.hpp"
#include "inproc.hpp"
#include "procs.hpp"
#include "node/node.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/users.hpp"
#include "tune/net/tls.hpp"
#include "transport/dial.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "wire.hpp"

using namespace tune;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {


constexpr int node_count = 4, gpus_per_node = 8;
using bench::die;

std::string sh(const std::string& cmd) { return bench::run(cmd); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

wire::wire_group_spec group_spec() {
  wire::wire_group_spec spec;
  spec.strategy = "SPREAD";
  auto b = wire::to_wire_request(*resource_set::make({{"gpu", 0.25}}));
  spec.bundles = {b, b};
  return spec;
}

struct driver_result {
  int pairs = 0;
  std::vector<double> ready_ms;
  std::string error;
};

// One client: `pairs` times create, wait until ready, remove, one group at a time.
caf::behavior driver(caf::event_based_actor* self, caf::actor head, std::string token, int pairs,
                     std::shared_ptr<std::promise<driver_result>> done) {
  auto res = std::make_shared<driver_result>();
  auto spec = group_spec();
  auto fail = [self, res, done](std::string why) {
    res->error = std::move(why);
    done->set_value(*res);
    self->quit();
  };
  auto next = std::make_shared<std::function<void()>>();
  *next = [=] {
    if (res->pairs == pairs) {
      done->set_value(*res);
      self->quit();
      return;
    }
    auto t0 = clock_type::now();
    self->request(head, 30s, wire::pg_create_atom::value, token, version(), spec)
        .then(
            [=](wire::pg_create_atom, const std::string& id, const std::string&, const std::string&) {
              self->request(head, 60s, wire::pg_wait_atom::value, token, id, int64_t{30000})
                  .then(
                      [=](wire::pg_wait_atom, bool ready, const std::string& state, const std::string& reason) {
                        if (!ready) return fail("group " + id + " not ready: " + state + " " + reason);
                        res->ready_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
                        self->request(head, 30s, wire::pg_remove_atom::value, token, id)
                            .then(
                                [=](wire::pg_remove_atom, const std::string&) {
                                  ++res->pairs;
                                  (*next)();
                                },
                                [=](caf::error& e) { fail("remove: " + to_string(e)); });
                      },
                      [=](caf::error& e) { fail("wait: " + to_string(e)); });
            },
            [=](caf::error& e) { fail("create: " + to_string(e)); });
  };
  (*next)();
  return {[](caf::unit_t) {}};
}

struct run_result {
  double pairs_per_s = 0;
  std::vector<double> ready_ms;
};

// `clients` drivers at once, `pairs` in all; driver c uses tokens[c % tokens.size()].
run_result run(caf::actor_system& sys, caf::actor head, const std::vector<std::string>& tokens, int clients, int pairs) {
  std::vector<std::future<driver_result>> futures;
  auto start = clock_type::now();
  for (int c = 0; c < clients; ++c) {
    auto p = std::make_shared<std::promise<driver_result>>();
    futures.push_back(p->get_future());
    sys.spawn(driver, head, tokens[static_cast<size_t>(c) % tokens.size()], pairs / clients, p);
  }
  run_result out;
  int total = 0;
  for (auto& f : futures) {
    if (f.wait_for(300s) != std::future_status::ready) die("a client did not finish in 300 s");
    auto r = f.get();
    if (!r.error.empty()) die(r.error);
    total += r.pairs;
    out.ready_ms.insert(out.ready_ms.end(), r.ready_ms.begin(), r.ready_ms.end());
  }
  out.pairs_per_s = total / std::chrono::duration<double>(clock_type::now() - start).count();
  return out;
}

// Everything the nodes hold once every group is removed: must be nothing.
int64_t held_after(caf::actor_system& sys, caf::actor head, const std::string& token) {
  caf::scoped_actor self{sys};
  int64_t left = -1;
  for (int i = 0; i < 40 && left != 0; ++i) {  // heartbeats bring the nodes' truth
    std::this_thread::sleep_for(100ms);
    self->request(head, 10s, wire::status_atom::value, token, version())
        .receive(
            [&](wire::status_atom, std::string& text) {
              auto j = nlohmann::json::parse(text);
              double gpu = j["resources"]["total"].value("gpu", 0.0) - j["resources"]["available"].value("gpu", 0.0);
              int64_t live = 0;
              for (auto& g : j["placement_groups"]) live += g["state"] != "removed";
              left = live + static_cast<int64_t>(gpu * 10000);
            },
            [](caf::error&) {});
  }
  return left;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, inproc_only = false, with_tls = false, simulated = false;
  int users = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--inproc-only") inproc_only = true;
    else if (a == "--users" && i + 1 < argc) users = std::max(0, std::atoi(argv[++i]));
    else if (a == "--tls") with_tls = true;
    else if (a == "--simulated") simulated = true;
    else {
      std::cout << "usage: bench_pg [--quick] [--inproc-only] [--users N] [--tls] [--simulated]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  bench::make_scratch("bench_pg");
  auto token = ensure_token(bench::scratch::token_path);
  if (!token) die(token.error().message());
  const int clients = 32;
  const int inproc_pairs = quick ? 4000 : 40000, loop_pairs = quick ? 2000 : 20000, latency_pairs = quick ? 300 : 2000;
  const int runs = quick ? 1 : 3;

  wire::config cfg;
  caf::actor_system sys{cfg};

  // (a) In this process.
  head_options hopt{token->token, "in-process", wire::heartbeat_timeout, groups_options{}};
  std::vector<std::string> admin{token->token}, user_tokens;
  if (users > 0) {
    auto store = user_store::open(bench::scratch::dir + "/inproc-users.db");
    if (!store) die(store.error().message());
    for (int u = 0; u < users; ++u) {
      auto rec = (*store)->add("user" + std::to_string(u), user_limits{});
      if (!rec) die(rec.error().message());
      user_tokens.push_back(rec->token);
    }
    hopt.users = std::shared_ptr<user_store>(std::move(*store));
  }
  auto head = spawn_head(sys, hopt);
  auto nodes = bench::spawn_inproc_nodes(sys, head, token->token, node_count, gpus_per_node);
  std::vector<double> inproc, inproc_ready, inproc_users;
  for (int r = 0; r < runs; ++r) {
    auto with_users = [&] {
      if (users == 0) return;
      auto u = run(sys, head, user_tokens, clients, inproc_pairs);
      inproc_users.push_back(u.pairs_per_s);
      std::printf("in process, run %d, %d users: %.0f pairs/s (create->ready p50 %.3f ms under load)\n", r + 1, users,
                  u.pairs_per_s, percentile(u.ready_ms, 0.5));
      std::fflush(stdout);
    };
    if (r % 2) with_users();  // which goes first alternates: neither always follows the other
    auto res = run(sys, head, admin, clients, inproc_pairs);
    inproc.push_back(res.pairs_per_s);
    inproc_ready.push_back(percentile(res.ready_ms, 0.5));
    std::printf("in process, run %d: %.0f pairs/s (%d clients; create->ready p50 %.3f ms under load)\n", r + 1,
                res.pairs_per_s, clients, inproc_ready.back());
    std::fflush(stdout);
    if (r % 2 == 0) with_users();
  }
  if (auto left = held_after(sys, head, token->token); left != 0) die("in process: something is still held after every group was removed");
  for (auto& n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  if (inproc_only) {
    std::printf("{\"inproc_pairs_per_s\": %.0f, \"inproc_users_pairs_per_s\": %.0f, \"users\": %d, \"clients\": %d, "
                "\"nodes\": %d, \"bundles_per_group\": 2, \"runs\": %d}\n",
                median(inproc), median(inproc_users), users, clients, node_count, runs);
    std::fflush(stdout);
    std::exit(0);
  }

  // (b) A head process and node processes on loopback.
  int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto started = sh(bench::tune_binary() + " start --head --host 127.0.0.1 --port " + std::to_string(port));
  if (started.find("head started at") == std::string::npos) die("cannot start a head: " + started);
  std::string view;  // --simulated: the cards' folder
  if (simulated) {
    view = bench::scratch::dir + "/gpus";
    std::filesystem::create_directories(view + "/procs");
    nlohmann::json cards = nlohmann::json::array();
    for (int c = 0; c < node_count * gpus_per_node; ++c) cards.push_back({{"uuid", "GPU-sim-" + std::to_string(c)}, {"memory", "80GiB"}});
    std::ofstream(view + "/cards.json") << cards.dump();
  }
  for (int i = 0; i < node_count; ++i) {
    std::string gpus = "--num-gpus " + std::to_string(gpus_per_node);
    if (simulated) {
      gpus = "--gpus ";
      for (int c = 0; c < gpus_per_node; ++c) gpus += (c ? "," : "") + std::to_string(i * gpus_per_node + c);
    }
    auto s = sh((simulated ? "TUNE_SIMULATED_GPUS=" + view + " " : std::string{}) +
                bench::tune_binary() + " start --address " + address + " " + gpus);
    if (s.find("node started") == std::string::npos && s.find("joined") == std::string::npos)
      die("cannot start a node: " + s);
  }
  auto remote = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
  if (!remote) die("cannot reach the head: " + sys.render(remote.error()));
  auto rhead = *remote;
  {
    caf::scoped_actor self{sys};
    int alive = 0;
    for (int i = 0; i < 100 && alive < node_count; ++i) {
      self->request(rhead, 5s, wire::status_atom::value, token->token, version())
          .receive([&](wire::status_atom, std::string& text) {
                     alive = 0;
                     auto j = nlohmann::json::parse(text);  // kept: a loop over a temporary's member dangles
                     for (auto& n : j["nodes"]) alive += n["alive"].get<bool>();
                   },
                   [&](caf::error& e) { std::cerr << "bench_pg: status: " << sys.render(e) << "\n"; });
      if (alive < node_count) std::this_thread::sleep_for(100ms);
    }
    if (alive < node_count) die("the node processes did not all join (" + std::to_string(alive) + " of " + std::to_string(node_count) + ")");
  }
  // --tls: a second cluster of the same shape that uses TLS, measured side by side with
  // the plain one in every run (which goes first alternates).
  caf::actor tls_head;
  int tls_port = port + 1;
  if (with_tls) {
    const std::string dir = bench::scratch::dir + "/tls";
    auto made = sh(bench::tune_binary() + " tls init " + dir);
    const std::string flags = " --tls-cert " + dir + "/cluster.crt --tls-key " + dir + "/cluster.key --tls-ca " + dir + "/ca.crt";
    auto h = sh(bench::tune_binary() + " start --head --host 127.0.0.1 --no-dashboard --port " + std::to_string(tls_port) + flags);
    if (h.find("head started at") == std::string::npos) die("cannot start a TLS head: " + made + h);
    for (int i = 0; i < node_count; ++i) {
      auto n = sh(bench::tune_binary() + " start --address 127.0.0.1:" + std::to_string(tls_port) + " --num-gpus " +
                  std::to_string(gpus_per_node) + flags);
      if (n.find("node started") == std::string::npos && n.find("joined") == std::string::npos) die("cannot start a TLS node: " + n);
    }
    auto ctx = tls::context::make({dir + "/cluster.crt", dir + "/cluster.key", dir + "/ca.crt"}, false);
    if (!ctx) die(ctx.error().message());
    set_client_tls(*ctx);
    auto d = dial(sys, "127.0.0.1", static_cast<uint16_t>(tls_port));
    if (!d) die(d.error().message());
    caf::scoped_actor self{sys};
    self->request(d->to, 5s, std::move(d->msg))
        .receive([&](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) { tls_head = caf::actor_cast<caf::actor>(p); },
                 [&](caf::error& e) { die("cannot reach the TLS head: " + connect_failure(sys, d->id, e).why); });
    if (!tls_head) die("no head at the TLS port");
    for (int i = 0; i < 100; ++i) {  // its nodes joined
      int alive = 0;
      self->request(tls_head, 5s, wire::status_atom::value, token->token, version())
          .receive([&](wire::status_atom, std::string& text) {
                     auto j = nlohmann::json::parse(text, nullptr, false);
                     if (j.is_object())
                       for (auto& n : j["nodes"]) alive += n["alive"].get<bool>();
                   },
                   [&](caf::error&) {});
      if (alive >= node_count) break;
      std::this_thread::sleep_for(100ms);
    }
  }
  std::vector<double> loop_tls;
  std::vector<std::string> loop_users;
  for (int u = 0; u < users; ++u) {  // through the CLI, as an admin does; each token in its file
    auto name = "user" + std::to_string(u);
    auto added = sh(bench::tune_binary() + " user add " + name + " --address " + address + " --token-file " +
                    bench::scratch::token_path + " --out " + bench::scratch::dir + "/" + name + ".token");
    auto t = read_token(bench::scratch::dir + "/" + name + ".token");
    if (!t) die("tune user add " + name + ": " + added);
    loop_users.push_back(t->token);
  }
  std::vector<double> loop, loop_u;
  for (int r = 0; r < runs; ++r) {
    auto with_users = [&] {
      if (users == 0) return;
      auto u = run(sys, rhead, loop_users, clients, loop_pairs);
      loop_u.push_back(u.pairs_per_s);
      std::printf("loopback, run %d, %d users: %.0f pairs/s\n", r + 1, users, u.pairs_per_s);
      std::fflush(stdout);
    };
    auto tls_run = [&] {
      if (!tls_head) return;
      auto t = run(sys, tls_head, admin, clients, loop_pairs);
      loop_tls.push_back(t.pairs_per_s);
      std::printf("loopback, run %d, TLS: %.0f pairs/s\n", r + 1, t.pairs_per_s);
      std::fflush(stdout);
    };
    if (r % 2) with_users(), tls_run();
    auto res = run(sys, rhead, admin, clients, loop_pairs);
    loop.push_back(res.pairs_per_s);
    std::printf("loopback, run %d: %.0f pairs/s (%d clients, %d node processes)\n", r + 1, res.pairs_per_s, clients,
                node_count);
    std::fflush(stdout);
    if (r % 2 == 0) with_users(), tls_run();
  }
  if (tls_head) {
    auto lat_tls = run(sys, tls_head, admin, 1, latency_pairs);
    std::printf("loopback latency with TLS, one group at a time: create->ready p50 %.3f ms, p99 %.3f ms\n",
                percentile(lat_tls.ready_ms, 0.5), percentile(lat_tls.ready_ms, 0.99));
    std::printf("{\"loopback_pairs_per_s\": %.0f, \"loopback_tls_pairs_per_s\": %.0f, \"tls_ratio\": %.3f, "
                "\"tls_ready_ms_p50\": %.3f}\n",
                median(loop), median(loop_tls), median(loop_tls) / median(loop), percentile(lat_tls.ready_ms, 0.5));
  }
  auto lat = run(sys, rhead, admin, 1, latency_pairs);
  std::printf("loopback latency, one group at a time: %d pairs, create->ready p50 %.3f ms, p99 %.3f ms\n",
              latency_pairs, percentile(lat.ready_ms, 0.5), percentile(lat.ready_ms, 0.99));
  if (auto left = held_after(sys, rhead, token->token); left != 0) die("loopback: something is still held after every group was removed");
  std::printf("{\"inproc_pairs_per_s\": %.0f, \"loopback_pairs_per_s\": %.0f, \"inproc_users_pairs_per_s\": %.0f, "
              "\"loopback_users_pairs_per_s\": %.0f, \"users\": %d, \"ready_ms_p50\": %.3f, "
              "\"ready_ms_p99\": %.3f, \"clients\": %d, \"nodes\": %d, \"bundles_per_group\": 2, \"runs\": %d, "
              "\"simulated_cards\": %s}\n",
              median(inproc), median(loop), median(inproc_users), median(loop_u), users, percentile(lat.ready_ms, 0.5),
              percentile(lat.ready_ms, 0.99), clients, node_count, runs, simulated ? "true" : "false");
  std::fflush(stdout);
  std::exit(0);
}
