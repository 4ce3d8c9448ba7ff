// A fixture for tests of trials on a real cluster: a head and one node process
// (through the tune binary), this test as the client (actors/client/client.hpp) that creates
// groups, serves the trainable and starts trials, and helpers to read their events.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "client/client.hpp"
#include "harness.hpp"

namespace tune::test {

class trial_cluster_test : public ::testing::Test {
 protected:
  cluster_files files;
  int port = free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  wire::config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<cluster_client> client;
  program_ref program;
  std::string node_id;
  int node_pid = 0, head_pid = 0;

  // Starts the head, a node with these extra arguments (`prefix` and `env` as for
  // cluster_files::tune), connects and serves `trainable`. Fails the test on error.
  void start_cluster(const std::vector<std::string>& node_args, const std::string& trainable,
                     const std::vector<std::string>& prefix = {}, std::map<std::string, std::string> env = {}) {
    auto h = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"});
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    head_pid = pid_in(h.out);
    std::vector<std::string> args{"start", "--address", address};
    args.insert(args.end(), node_args.begin(), node_args.end());
    auto n = files.tune(args, prefix, "", std::move(env));
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    node_id = node_id_in(n.out);
    node_pid = pid_in(n.out);
    sys = std::make_unique<caf::actor_system>(cfg);
    std::ifstream in(files.dir() + "/token");
    std::string tok;
    std::getline(in, tok);
    auto c = cluster_client::connect(*sys, "127.0.0.1", static_cast<uint16_t>(port), tok);
    ASSERT_TRUE(c) << c.error().message();
    client = std::move(c).value();
    auto p = client->serve_program(trainable);
    ASSERT_TRUE(p) << p.error().message();
    program = *p;
  }
  void TearDown() override {
    client.reset();
    files.tune({"stop", "--grace", "3"});
  }

  // A created group of these bundles (PACK), or "" after a test failure.
  std::string group(std::vector<resource_set> bundles) {
    auto made = client->create_group({"", strategy::pack, std::move(bundles), false});
    EXPECT_TRUE(made) << made.error().message();
    if (!made) return "";
    auto ready = client->wait_ready(made->id, std::chrono::seconds(10));
    EXPECT_TRUE(ready) << ready.error().message();
    return made->id;
  }

  // Starts the served program as trial `id` in a bundle; what the node answered.
  expected<nlohmann::json> start(const std::string& id, const std::string& g, nlohmann::json config, uint32_t bundle = 0) {
    auto r = client->start_trial({id, g, bundle, program, {}, config.dump()});
    if (!r) return r.error();
    return nlohmann::json::parse(*r);
  }

  static nlohmann::json body(const trial_event& e) { return nlohmann::json::parse(e.json); }

  // Events of any trial until `done` says so (or the time limit).
  std::vector<trial_event> events_until(const std::function<bool(const trial_event&)>& done,
                                        std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    std::vector<trial_event> seen;
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      auto e = client->next_trial_event(std::chrono::milliseconds(100));
      if (!e) continue;
      seen.push_back(*e);
      if (done(*e)) break;
    }
    return seen;
  }

  // Events of one trial until its end (or the time limit).
  std::vector<trial_event> until_ended(const std::string& id,
                                       std::chrono::milliseconds limit = std::chrono::seconds(10),
                                       const std::function<void(const trial_event&)>& on = {}) {
    std::vector<trial_event> mine;
    events_until(
        [&](const trial_event& e) {
          if (e.trial_id != id) return false;
          mine.push_back(e);
          if (on) on(e);
          return e.kind == "ended";
        },
        limit);
    return mine;
  }
};

}  // namespace tune::test
