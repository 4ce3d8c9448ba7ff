// The dashboard's HTTP side against a head actor in this process: sign-in (header,
// cookie, token in the address, the form), every JSON view, /metrics, and errors.
#include "dashboard.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "head/head.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
const std::string token = "0123456789abcdef0123456789abcdef";

struct DashboardTest : ::testing::Test {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  caf::actor head;
  std::unique_ptr<dashboard_server> server;

  void SetUp() override {
    auto bound = dashboard_server::bind(sys, {"127.0.0.1", 0, false});
    ASSERT_TRUE(bound) << bound.error().message();
    server = std::move(*bound);
    head_options opt{token, "test:6380", wire::heartbeat_timeout};
    opt.dashboard = "http://127.0.0.1:" + std::to_string(server->port()) + "/";
    head = spawn_head(sys, opt);
    server->serve(head);
  }
  void TearDown() override {
    server.reset();
    caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  }

  httplib::Client client() {
    httplib::Client c{"127.0.0.1", server->port()};
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Headers bearer(const std::string& t = token) { return {{"Authorization", "Bearer " + t}}; }

  nlohmann::json get_json(const std::string& path, int want = 200) {
    auto c = client();
    auto r = c.Get(path, bearer());
    EXPECT_TRUE(r) << path;
    if (!r) return nullptr;
    EXPECT_EQ(r->status, want) << path << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    return nlohmann::json::parse(r->body);
  }

  // A node joins (as a remote node would: its advertisement), with two logical GPUs.
  void join(caf::scoped_actor& node, const std::string& id) {
    resource_set host;
    host.set_cpu(quantity::whole(8)).set_memory(int64_t{32} << 30);
    auto n = *node_resources::make(host, logical_gpus(id, 2, int64_t{16} << 30));
    auto ad = wire::make_ad(id, "host-" + id, "10.0.0.2", n);
    ad.version = version();
    node->request(head, 5s, wire::join_atom::value, token, ad)
        .receive([](wire::join_atom, std::string&) {},
                 [](caf::error& e) { FAIL() << to_string(e); });
  }

  void report(caf::scoped_actor& program, const nlohmann::json& r) {
    program->send(head, wire::board_atom::value, token, r.dump());
  }
};

TEST_F(DashboardTest, EverythingButHealthNeedsTheToken) {
  auto c = client();
  for (auto path : {"/", "/app.js", "/api/cluster", "/api/experiments", "/metrics"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->body.find("libtune_"), std::string::npos) << path;  // nothing leaks
    auto wrong = c.Get(path, bearer("not-the-token-at-all"));
    EXPECT_EQ(wrong->status, 401) << path;
  }
  EXPECT_NE(c.Get("/")->body.find("Sign in with the cluster token"), std::string::npos);
  EXPECT_NE(c.Get("/api/cluster")->body.find("Authorization: Bearer"), std::string::npos);
  auto health = c.Get("/healthz");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->get_header_value("Cache-Control"), "no-store");
  EXPECT_NE(c.Get("/")->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
}

TEST_F(DashboardTest, TheTokenInTheAddressBecomesACookie) {
  auto c = client();
  auto r = c.Get("/?token=" + token);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(r->get_header_value("Location"), "/");  // the token is not left in the address
  auto cookie = r->get_header_value("Set-Cookie");
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos);
  auto page = c.Get("/", {{"Cookie", "other=1; " + cookie.substr(0, cookie.find(';'))}});
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/app.js"), std::string::npos);
  auto wrong = c.Get("/?token=nope");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("not this cluster's"), std::string::npos);
  // The sign-in form.
  auto form = c.Post("/login", "token=" + token, "application/x-www-form-urlencoded");
  EXPECT_EQ(form->status, 303);
  EXPECT_NE(form->get_header_value("Set-Cookie").find(token), std::string::npos);
  EXPECT_EQ(c.Post("/login", "token=x", "application/x-www-form-urlencoded")->status, 401);
}

TEST_F(DashboardTest, ViewsShowTheClusterAndTheExperiments) {
  caf::scoped_actor node{sys}, program{sys};
  join(node, "node-a");
  report(program, nlohmann::json::parse(R"({"id": "exp-1", "full": true, "name": "mnist", "metric": "acc",
      "mode": "max", "state": "running", "results": 4,
      "trials": [{"id": "t1", "state": "running", "node": "node-a", "pid": 99, "config": {"lr": 0.1}, "group": "pg-x"}],
      "points": {"t1": [[1, 0.5], [2, 0.7]]}})"));
  // Reports are messages: the views show them once the head has read them.
  nlohmann::json list;
  for (int i = 0; i < 100 && (list = get_json("/api/experiments")).empty(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["best"]["value"], 0.7);

  auto cluster = get_json("/api/cluster");
  EXPECT_EQ(cluster["alive_nodes"], 1);
  EXPECT_EQ(cluster["nodes"][0]["id"], "node-a");
  EXPECT_EQ(cluster["gpus"].size(), 2u);
  EXPECT_EQ(cluster["experiments"][0]["id"], "exp-1");
  EXPECT_EQ(cluster["head"]["dashboard"], "http://127.0.0.1:" + std::to_string(server->port()) + "/");
  EXPECT_EQ(get_json("/api/nodes").size(), 1u);
  EXPECT_EQ(get_json("/api/gpus")[1]["uuid"], "LOGICAL-node-a-1");
  EXPECT_TRUE(get_json("/api/groups").is_array());
  auto e = get_json("/api/experiments/exp-1");
  EXPECT_EQ(e["trial_table"][0]["curve"].size(), 2u);
  auto t = get_json("/api/experiments/exp-1/trials/t1");
  EXPECT_EQ(t["pid"], 99);
  EXPECT_EQ(t["config"]["lr"], 0.1);

  EXPECT_NE(get_json("/api/experiments/nope", 404)["error"].get<std::string>().find("no experiment nope"), std::string::npos);
  EXPECT_NE(get_json("/api/experiments/exp-1/trials/t9", 404)["error"].get<std::string>().find("no trial t9"), std::string::npos);
  EXPECT_NE(get_json("/api/nothing", 404)["error"].get<std::string>().find("/api/cluster"), std::string::npos);

  // The program ends without saying so: its experiment is interrupted.
  program.~scoped_actor();
  new (&program) caf::scoped_actor{sys};
  for (int i = 0; i < 100 && get_json("/api/experiments")[0]["state"] == "running"; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(get_json("/api/experiments")[0]["state"], "interrupted");

  auto c = client();
  auto m = c.Get("/metrics", bearer());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m->body.find("libtune_nodes_alive 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("libtune_gpus 2\n"), std::string::npos);
  EXPECT_NE(m->body.find("libtune_results_ingested_total 4\n"), std::string::npos);
  EXPECT_NE(m->body.find("libtune_trials{state=\"running\"} 1\n"), std::string::npos);
}

TEST_F(DashboardTest, APortInUseIsAClearError) {
  auto again = dashboard_server::bind(sys, {"127.0.0.1", server->port(), false});
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("--dashboard-port"), std::string::npos);
  auto other = dashboard_server::bind(sys, {"127.0.0.1", server->port(), true});
  ASSERT_TRUE(other);  // the default port taken: any free one
  EXPECT_NE((*other)->port(), server->port());
  EXPECT_FALSE(dashboard_server::bind(sys, {"127.0.0.1", 70000, false}));
}

// The socket behind the port: in a folder of its own in socket_parent (a killed head's
// is left in its runtime dir, not in /tmp), removed when the server ends.
TEST_F(DashboardTest, TheSocketsFolderIsInItsParentAndGoesWithTheServer) {
  char tmpl[] = "/tmp/dashboard-test-XXXXXX";
  struct removed {
    std::string path;
    ~removed() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } parent{::mkdtemp(tmpl)};
  dashboard_options opt{"127.0.0.1", 0, false};
  opt.socket_parent = parent.path;
  auto bound = dashboard_server::bind(sys, opt);
  ASSERT_TRUE(bound) << bound.error().message();
  std::vector<std::string> inside;
  for (auto& e : std::filesystem::directory_iterator(parent.path)) inside.push_back(e.path().filename().string());
  ASSERT_EQ(inside.size(), 1u);
  EXPECT_TRUE(inside[0].starts_with("libtune-dashboard-")) << inside[0];
  EXPECT_TRUE(std::filesystem::exists(parent.path + "/" + inside[0] + "/http.sock"));
  bound->reset();
  EXPECT_TRUE(std::filesystem::is_empty(parent.path)) << "the socket's folder outlived the server";
}

}  // namespace
}  // namespace tune
