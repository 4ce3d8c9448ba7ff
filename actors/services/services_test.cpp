// The node assembled from its host, as the CLI and the embedded cluster both do it.
#include "services.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace tune {
namespace {

// An installed libtune outside the loader's own folders: the trials' programs (run from
// the node's copy, where $ORIGIN/../lib leads nowhere) find it through LD_LIBRARY_PATH.
TEST(Services, TrialsFindTheLibtuneTheNodeRunsOn) {
  auto dir = ::testing::TempDir() + "trial-libpath";
  std::filesystem::create_directories(dir + "/lib");
  std::ofstream{dir + "/lib/libtune.so.0.1.0"} << "";
  std::filesystem::remove(dir + "/lib/libtune.so.0.1");
  std::filesystem::create_symlink("libtune.so.0.1.0", dir + "/lib/libtune.so.0.1");
  auto lib = std::filesystem::weakly_canonical(dir + "/lib").string();
  EXPECT_EQ(trial_library_path(nullptr, dir + "/lib/libtune.so.0.1"), lib);
  EXPECT_EQ(trial_library_path("", dir + "/lib/libtune.so.0.1"), lib);
  EXPECT_EQ(trial_library_path("/opt/cuda/lib64", dir + "/lib/libtune.so.0.1"), "/opt/cuda/lib64:" + lib)
      << "at the end: what the user set comes first";
  EXPECT_EQ(trial_library_path(("/a:" + lib + ":/b").c_str(), dir + "/lib/libtune.so.0.1"), std::nullopt)
      << "already there";
  EXPECT_EQ(trial_library_path((lib + "/x").c_str(), dir + "/lib/libtune.so.0.1"), lib + "/x:" + lib)
      << "a longer folder is not the same folder";
  EXPECT_EQ(trial_library_path(nullptr, "/usr/lib/x86_64-linux-gnu/libtune.so.0.1"), std::nullopt)
      << "the loader searches it anyway (the Debian package)";
  EXPECT_EQ(trial_library_path(nullptr, "/work/build/tests/some_test"), std::nullopt)
      << "libtune linked into the program: nothing to find";
  // This test links libtune's layers statically: the process's own environment is unchanged.
  const char* mine = std::getenv("LD_LIBRARY_PATH");
  auto env = inherited_trial_env();
  EXPECT_EQ(env.count("LD_LIBRARY_PATH") ? env["LD_LIBRARY_PATH"] : std::string{"(unset)"},
            mine ? std::string{mine} : std::string{"(unset)"});
}

TEST(Services, TheBoundsAreTheSameForEveryCaller) {
  EXPECT_TRUE(check_gpu_audit_ms(0, "--gpu-audit-ms"));
  EXPECT_TRUE(check_gpu_audit_ms(min_audit_ms, "--gpu-audit-ms"));
  EXPECT_TRUE(check_gpu_audit_ms(max_audit_ms, "--gpu-audit-ms"));
  for (int bad : {-1, 5, max_audit_ms + 1}) {
    auto s = check_gpu_audit_ms(bad, "gpu_audit_ms");
    ASSERT_FALSE(s) << bad;
    EXPECT_EQ(s.message(), "gpu_audit_ms must be 0 (off) or between 10 and 600000 (ms), not " + std::to_string(bad));
  }
  EXPECT_TRUE(check_trial_max_pids(0, "--trial-max-pids"));
  EXPECT_TRUE(check_trial_max_pids(8, "--trial-max-pids"));
  auto s = check_trial_max_pids(3, "--trial-max-pids");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "--trial-max-pids must be 0 (no limit) or at least 8, not 3");
}

TEST(Services, ANodeTakesItsHostPartsAndNoAuditWithoutRealCards) {
  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);  // the node's own: never the trials'
  ::setenv("TUNE_TRAIN_POOLED_GRADS", "0", 1);  // the built-in training's switch: the trials' too
  ::setenv("TUNE_TRAIN_UNKNOWN_SWITCH", "1", 1);  // not one of them: not passed on
  auto host = open_node_host({"svc-test", "subreaper", {}});
  ASSERT_TRUE(host) << host.error().message();
  EXPECT_TRUE(host->workers);
  ASSERT_TRUE(host->contain);
  EXPECT_EQ(host->contain->caps().kind(), "subreaper");
  node_options opt;
  auto res = node_resources::make(resource_set{}.set_cpu(quantity::from_double(2, "cpu").value()), {});
  ASSERT_TRUE(res);
  opt.resources = *res;
  fill_node_options(opt, *host, 200, 64);
  EXPECT_EQ(opt.workers, host->workers);
  EXPECT_EQ(opt.contain, host->contain);
  EXPECT_EQ(opt.trial_max_pids, 64);
  EXPECT_FALSE(opt.gpu_library);  // no real card: no audit
  EXPECT_FALSE(opt.trial_env.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(opt.trial_env.count("PATH"));
  EXPECT_EQ(opt.trial_env["TUNE_TRAIN_POOLED_GRADS"], "0");
  EXPECT_FALSE(opt.trial_env.count("TUNE_TRAIN_UNKNOWN_SWITCH"));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::unsetenv("TUNE_TRAIN_POOLED_GRADS");
  ::unsetenv("TUNE_TRAIN_UNKNOWN_SWITCH");
}

TEST(Services, AHeadWithItsDashboardShowsWhereTheDashboardIs) {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  head_options hopt{"tok", "h:1", wire::heartbeat_timeout, {}};
  auto wild = start_head_service(sys, hopt, dashboard_options{"0.0.0.0", 0, false}, "gpu-a");
  ASSERT_TRUE(wild) << wild.error().message();
  ASSERT_TRUE(wild->dashboard);
  EXPECT_EQ(wild->dashboard_url, "http://gpu-a:" + std::to_string(wild->dashboard->port()) + "/");
  auto local = start_head_service(sys, hopt, dashboard_options{"127.0.0.1", 0, false}, "gpu-a");
  ASSERT_TRUE(local);
  EXPECT_EQ(local->dashboard_url, "http://127.0.0.1:" + std::to_string(local->dashboard->port()) + "/");
  auto none = start_head_service(sys, hopt, std::nullopt, "gpu-a");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->dashboard);
  EXPECT_EQ(none->dashboard_url, "");
  // A port that is taken is the caller's error, not a head without a dashboard.
  auto taken = start_head_service(sys, hopt, dashboard_options{"127.0.0.1", local->dashboard->port(), false}, "gpu-a");
  EXPECT_FALSE(taken);
  for (auto* h : {&*wild, &*local, &*none}) {
    h->dashboard.reset();
    caf::anon_send_exit(h->head, caf::exit_reason::user_shutdown);
  }
}

// A host without cards, and one with two.
host_info test_host(int cards) {
  host_info h;
  h.hostname = "svc-host";
  h.cpus = quantity::whole(4);
  h.memory = int64_t{8} << 30;
  h.gpu.note = "no GPU here";
  for (int i = 0; i < cards; ++i)
    h.gpu.gpus.push_back({i, "GPU-test-" + std::to_string(i), "", "Test GPU", int64_t{16} << 30});
  return h;
}

std::string resource_error(const node_resource_request& req, int cards = 0, const node_option_names& names = {}) {
  auto r = node_resources_for(req, test_host(cards), "node-test", names);
  return r ? std::string{"(accepted)"} : r.error().message();
}

// One check of a node's resources for `tune start --address` and the embedded cluster:
// the stricter one (CPUs more than 0), each naming the option as its caller spells it.
TEST(Services, TheNodesResourcesAreCheckedOnceForEveryStarter) {
  auto plain = node_resources_for({}, test_host(0), "node-test");
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_EQ(plain->total().cpu(), quantity::whole(4)) << "default: the host's CPUs";
  EXPECT_TRUE(plain->gpus().empty());
  EXPECT_EQ(resource_error({.num_cpus = 0.0}), "--num-cpus must be more than 0");
  EXPECT_EQ(resource_error({.num_cpus = 0.0}, 0, api_option_names()), "num_cpus must be more than 0");
  EXPECT_NE(resource_error({.num_cpus = -1.0}).find("the amount of --num-cpus (-1) is negative"), std::string::npos);
  EXPECT_NE(resource_error({.num_cpus = -1.0}, 0, api_option_names()).find("num_cpus (-1) is negative"), std::string::npos);
  auto half = node_resources_for({.num_cpus = 2.5, .resources = R"({"tpu": 2})"}, test_host(0), "node-test");
  ASSERT_TRUE(half) << half.error().message();
  EXPECT_EQ(half->total().cpu(), *quantity::from_double(2.5, "cpu"));
  EXPECT_EQ(half->total().custom("tpu"), quantity::whole(2));
  EXPECT_EQ(resource_error({.resources = R"({"cpu": 2})"}),
            "--resources is for custom resources; give CPUs with --num-cpus and GPUs with --num-gpus or --gpus");
  EXPECT_EQ(resource_error({.gpus = "0"}), "--gpus: this machine has no GPU (no GPU here); --num-gpus N declares N logical GPUs");
  EXPECT_EQ(resource_error({.num_gpus = 1, .gpus = "0"}, 2), "give --gpus or --num-gpus, not both");
  auto logical = node_resources_for({.num_gpus = 2}, test_host(0), "node-test");
  ASSERT_TRUE(logical) << logical.error().message();
  ASSERT_EQ(logical->gpus().size(), 2u);
  EXPECT_TRUE(logical->gpus()[0].logical);
}

TEST(Services, GpusByIndexAreCardsOfThisMachineEachOnce) {
  auto one = node_resources_for({.gpus = "1"}, test_host(2), "node-test");
  ASSERT_TRUE(one) << one.error().message();
  ASSERT_EQ(one->gpus().size(), 1u);
  EXPECT_EQ(one->gpus()[0].uuid, "GPU-test-1");
  EXPECT_EQ(resource_error({.gpus = "0,0"}, 2), "--gpus: GPU 0 is listed twice");
  EXPECT_EQ(resource_error({.gpus = "5"}, 2), "--gpus: there is no GPU 5; this machine has 2 (0..1)");
  EXPECT_EQ(resource_error({.gpus = "0,x"}, 2), "--gpus '0,x': give GPU indices separated by commas, e.g. 0,2");
  auto first = node_resources_for({.num_gpus = 1}, test_host(2), "node-test");
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_EQ(first->gpus().size(), 1u);
  EXPECT_EQ(first->gpus()[0].uuid, "GPU-test-0");
}

// A node of `id` with 1 CPU (and `gpus` logical cards) for the head `head` in this process.
node_options test_node(const std::string& id, caf::actor head, const std::string& token, int gpus = 0) {
  node_options opt;
  opt.head_host = "embedded";
  opt.token = token;
  opt.node_id = id;
  opt.hostname = "svc-host";
  opt.address = "127.0.0.1";
  opt.resources = *node_resources::make(resource_set{}.set_cpu(quantity::whole(1)), logical_gpus(id, gpus, int64_t{1} << 30));
  opt.head_actor = head;
  return opt;
}

// The one join wait outlasts the node's own verdict on a head it cannot reach: what the
// user reads is the node's reason, not "no answer".
TEST(Services, TheJoinWaitOutlastsTheNodesOwnVerdict) {
  EXPECT_GT(node_join_timeout, node_options{}.first_join_deadline + wire::request_timeout);
  EXPECT_EQ(node_start_options{}.join_timeout, node_join_timeout);
}

TEST(Services, ANodeJoinsItsHeadOrSaysWhyNot) {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  auto head = spawn_head(sys, {"tok", "h:1", wire::heartbeat_timeout, {}});
  auto joined = start_node_service(sys, test_node("svc-a", head, "tok"));
  ASSERT_TRUE(joined) << joined.why.message();
  EXPECT_TRUE(joined.node);
  EXPECT_FALSE(joined.mps);
  auto refused = start_node_service(sys, test_node("svc-b", head, "not-the-token"));
  EXPECT_EQ(refused.at, node_start::step::refused);
  EXPECT_NE(refused.why.message().find("refused this node"), std::string::npos) << refused.why.message();
  EXPECT_FALSE(refused.node);
  caf::anon_send_exit(joined.node, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
}

// A head that never answers: the start gives up after the join wait, and the node it
// spawned is told to exit (else the actor system would wait for it at its end).
TEST(Services, ANodeNobodyAnswersGivesUpAfterTheJoinWait) {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  auto silent = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::skip);  // every request stays unanswered
    return {[](caf::ok_atom) {}};
  });
  auto t0 = std::chrono::steady_clock::now();
  auto s = start_node_service(sys, test_node("svc-c", silent, "tok"), {.join_timeout = std::chrono::milliseconds(300)});
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.at, node_start::step::no_answer);
  EXPECT_EQ(s.why.code(), errc::insufficient);
  EXPECT_FALSE(s.node);
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, wire::request_timeout) << "the wait, not the node's own request, ended it";
  caf::anon_send_exit(silent, caf::exit_reason::kill);
}

// MPS is the services' for every starter: asked for a node without real cards, it is a
// bad option, said before anything is spawned.
TEST(Services, MpsNeedsRealCards) {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  auto none = start_node_service(sys, test_node("svc-d", {}, "tok"), {.mps = true});
  EXPECT_EQ(none.at, node_start::step::mps_cards);
  EXPECT_EQ(none.why.message(), "--mps needs real GPUs (this node has none)");
  auto logical = start_node_service(sys, test_node("svc-e", {}, "tok", 2), {.mps = true, .names = api_option_names()});
  EXPECT_EQ(logical.at, node_start::step::mps_cards);
  EXPECT_EQ(logical.why.message(), "mps needs real GPUs (this node has logical ones only)");
  EXPECT_FALSE(logical.node);
}

TEST(Services, ABadContainmentIsAnErrorBeforeAnythingStarts) {
  auto host = open_node_host({"svc-test", "jail", {}});
  ASSERT_FALSE(host);
  EXPECT_NE(host.error().message().find("auto, cgroup or subreaper"), std::string::npos);
}

}  // namespace
}  // namespace tune
