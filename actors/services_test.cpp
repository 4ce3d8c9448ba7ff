// The node assembled from its host, as the CLI and the embedded cluster both do it.
#include "services.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

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

TEST(Services, ABadContainmentIsAnErrorBeforeAnythingStarts) {
  auto host = open_node_host({"svc-test", "jail", {}});
  ASSERT_FALSE(host);
  EXPECT_NE(host.error().message().find("auto, cgroup or subreaper"), std::string::npos);
}

}  // namespace
}  // namespace tune
