#include "metrics.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace tune {
namespace {

nlohmann::json sample_status() {
  latency_histogram h;
  for (double s : {0.0004, 0.003, 0.003, 0.2, 75.0}) h.observe(s);
  auto j = nlohmann::json::parse(R"({
    "head": {"uptime_s": 12.5, "version": "0.1.0"},
    "nodes": [
      {"id": "n1", "state": "alive", "alive": true,
       "gpus": [{"index": 0, "uuid": "GPU-a", "allocated": 0.75}, {"index": 1, "uuid": "GPU-\"b\"", "allocated": 0}],
       "gpu_audit": [{"uuid": "GPU-a", "memory_used": 1024}]},
      {"id": "n2", "state": "draining", "alive": true, "gpus": [{"index": 0, "uuid": "GPU-c", "allocated": 1}]},
      {"id": "n3", "state": "dead", "alive": false, "gpus": [{"index": 0, "uuid": "GPU-d", "allocated": 1}]}
    ],
    "placement_groups": [{"id": "pg-1", "state": "created"}, {"id": "pg-2", "state": "pending"}]
  })");
  j["placement_latency"] = h.to_json();
  return j;
}

TEST(LatencyHistogram, BucketsAndRoundTrip) {
  latency_histogram h;
  h.observe(0.001);  // on a bound: that bucket (le is "less or equal")
  h.observe(0.0011);
  h.observe(1e9);
  h.observe(-1);  // a clock going back counts as 0
  auto j = h.to_json();
  EXPECT_EQ(j["counts"][0], 2);
  EXPECT_EQ(j["counts"][1], 1);
  EXPECT_EQ(j["counts"][latency_histogram::bounds.size()], 1);
  auto back = latency_histogram::from_json(j);
  EXPECT_EQ(back.count(), 4u);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(latency_histogram::from_json(nlohmann::json::array()).count(), 0u);
}

TEST(PrometheusText, TheMetricsTheIssueAsksFor) {
  experiment_board b;
  ASSERT_TRUE(b.apply(nlohmann::json::parse(R"({"id": "e1", "full": true, "results": 17,
      "trials": [{"id": "t1", "state": "running"}, {"id": "t2", "state": "terminated"}, {"id": "t3", "state": "running"}]})"),
                      1));
  auto text = prometheus_text(sample_status(), b);
  for (auto line : {"libtune_nodes_alive 2\n", "libtune_nodes{state=\"dead\"} 1\n", "libtune_nodes{state=\"draining\"} 1\n",
                    "libtune_gpus 3\n", "libtune_gpus_allocated 1.75\n",
                    "libtune_gpu_allocated{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 0.75\n",
                    "libtune_gpu_allocated{node=\"n1\",gpu=\"1\",uuid=\"GPU-\\\"b\\\"\"} 0\n",
                    "libtune_gpu_memory_used_bytes{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 1024\n",
                    "libtune_trials{state=\"running\"} 2\n", "libtune_trials{state=\"terminated\"} 1\n",
                    "libtune_trials{state=\"error\"} 0\n", "libtune_results_ingested_total 17\n",
                    "libtune_experiments{state=\"running\"} 1\n", "libtune_placement_groups{state=\"created\"} 1\n",
                    "libtune_placement_group_latency_seconds_bucket{le=\"0.001\"} 1\n",
                    "libtune_placement_group_latency_seconds_bucket{le=\"0.0025\"} 1\n",
                    "libtune_placement_group_latency_seconds_bucket{le=\"0.005\"} 3\n",
                    "libtune_placement_group_latency_seconds_bucket{le=\"60\"} 4\n",
                    "libtune_placement_group_latency_seconds_bucket{le=\"+Inf\"} 5\n",
                    "libtune_placement_group_latency_seconds_count 5\n", "libtune_head_uptime_seconds 12.5\n",
                    "libtune_build_info{version=\"0.1.0\"} 1\n", "# TYPE libtune_results_ingested_total counter\n",
                    "# TYPE libtune_placement_group_latency_seconds histogram\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
}

// Prometheus' own checker (promtool, Debian's prometheus package) reads the page.
TEST(PrometheusText, PromtoolAcceptsIt) {
  if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "promtool is not installed (deploy/install-deps.sh installs it)";
  experiment_board b;
  auto text = prometheus_text(sample_status(), b);
  std::string file = ::testing::TempDir() + "metrics.txt";
  std::ofstream{file} << text;
  std::string cmd = "/usr/bin/promtool check metrics < " + file + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = ::pclose(p);
  std::remove(file.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0) << out;
  EXPECT_EQ(out, "") << "promtool's remarks on the page";
}

}  // namespace
}  // namespace tune
