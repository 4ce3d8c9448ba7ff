// Auto-packing on a real card (GPU machine; skipped without one): an experiment with
// resources_per_trial {gpu: "auto"} probes one trial, sizes the share from the peak
// the GPU audit measured, runs the rest packed at that share, and restarts a trial that
// outgrows its share from its checkpoint on a bigger one (not a failure).
//
// This program is its own trainable: a node runs it as a trial's worker.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "tune/host/detect.hpp"
#include "tune/tune.hpp"

namespace {

using namespace std::chrono_literals;

// Holds `base_mib` on its card; from iteration `grow_at` (0: never) `grow_mib` more.
// `iterations` of 150 ms each, a checkpoint at each (a restart goes on from it).
void grower(tune::trial_context& ctx) {
  int64_t base = ctx.integer_or("base_mib", 512).value();
  int64_t grow = ctx.integer_or("grow_mib", 0).value();
  int64_t grow_at = ctx.integer_or("grow_at", 0).value();
  int64_t n = ctx.integer_or("iterations", 12).value();
  int64_t i = 0;
  if (!ctx.restore_dir().empty()) std::ifstream(ctx.restore_dir() + "/state") >> i;
  std::vector<void*> blocks;
  auto take = [&](int64_t mib) {
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<size_t>(mib) << 20) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(mib) + " MiB failed (out of memory)");
    cudaMemset(p, 1, static_cast<size_t>(mib) << 20);
    cudaDeviceSynchronize();
    blocks.push_back(p);
  };
  take(base);
  bool grown = false;
  while (i < n) {
    if (grow > 0 && grow_at > 0 && i + 1 >= grow_at && !grown) {
      take(grow);
      grown = true;
    }
    std::this_thread::sleep_for(150ms);
    ++i;
    if (!ctx.report({{"score", static_cast<double>(i)}}, i)) return;
    auto dir = ctx.checkpoint_dir(i);
    if (!dir) throw std::runtime_error(dir.error().message());
    std::ofstream(*dir + "/state") << i;
    (void)ctx.report_checkpoint(i);
    if (tune::trial_context::should_stop()) return;
  }
}
TUNE_TRAINABLE(grower);

class GpuPacking : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tune::detect_gpus().gpus.empty()) GTEST_SKIP() << "no GPU here";
  }
  tune::test::cluster_files files;
  tune::cluster_options options() {
    tune::cluster_options o;
    o.num_cpus = 16;
    o.num_gpus = 1;
    o.work_dir = files.dir() + "/work";
    return o;
  }
  tune::tune_config config(int samples) {
    tune::tune_config cfg;
    cfg.metric = "score";
    cfg.num_samples = samples;
    cfg.seed = 5;
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = files.dir() + "/exp";
    cfg.resources_per_trial = tune::resources{{"cpu", 1}, {"gpu", "auto"}};
    return cfg;
  }
  static std::vector<tune::event_row> of_kind(const tune::result_grid& r, const std::string& kind) {
    std::vector<tune::event_row> out;
    auto events = r.store().events();
    if (events)
      for (auto& e : *events)
        if (e.kind == kind) out.push_back(e);
    return out;
  }
};

TEST_F(GpuPacking, TheProbesPeakSizesTheShareAndTheRestRunPacked) {
  auto c = tune::cluster::start(options());
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(10);
  cfg.auto_packing.min_share = 1.0 / 32;
  tune::tuner t{*c, "grower", tune::search_space{{"base_mib", 1024}, {"iterations", 12}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  for (auto& tr : *trials) EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
  auto shares = of_kind(*r, "auto_share");
  ASSERT_EQ(shares.size(), 1u);
  auto& s = shares[0].body;
  // 1 GiB and a CUDA context (about 0.5 GiB): measured, and far below a quarter card.
  EXPECT_GT(s["peak"].get<int64_t>(), int64_t{1} << 30) << s;
  EXPECT_LT(s["peak"].get<int64_t>(), int64_t{3} << 30) << s;
  EXPECT_LT(s["share"].get<double>(), 0.25) << s;
  EXPECT_GE(s["quota"].get<int64_t>(), static_cast<int64_t>(s["peak"].get<double>() * 1.25)) << s;
  auto caps = of_kind(*r, "auto_concurrency");
  ASSERT_EQ(caps.size(), 1u);
  EXPECT_GT(caps[0].body["max_concurrent"].get<int>(), 4) << "more at once than a fixed quarter share gives";
  EXPECT_TRUE(of_kind(*r, "auto_outgrown").empty());
}

TEST_F(GpuPacking, ATrialThatOutgrowsItsShareIsRestartedOnABiggerOneFromItsCheckpoint) {
  auto c = tune::cluster::start(options());
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(1);
  cfg.search = tune::grid_search_alg{};
  cfg.max_concurrent_trials = 1;  // the second starts after the share is sized (not on the probe share)
  cfg.auto_packing.min_share = 1.0 / 64;
  cfg.auto_packing.margin = 0.1;
  // Every trial holds 512 MiB; the one with grow_at 5 takes 6 GiB more there, above the
  // share sized for the probe (which never grows: grid order puts grow_at 0 first).
  tune::tuner t{*c, "grower",
                tune::search_space{{"base_mib", 512}, {"grow_mib", 6144}, {"grow_at", tune::grid_search({0, 5})},
                                   {"iterations", 10}},
                cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 2u);
  for (auto& tr : *trials) EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
  auto grown = of_kind(*r, "auto_outgrown");
  ASSERT_EQ(grown.size(), 1u);
  EXPECT_EQ(grown[0].trial, "trial-00002");
  EXPECT_GT(grown[0].body["share"].get<double>(), grown[0].body["was"].get<double>()) << grown[0].body;
  EXPECT_TRUE(of_kind(*r, "restart").empty()) << "not counted as a failure";
  auto h = r->history("trial-00002");
  ASSERT_TRUE(h);
  ASSERT_FALSE(h->empty());
  EXPECT_EQ(h->back().iteration, 10);
}

}  // namespace

int main(int argc, char** argv) {
  tune::run_if_trial_worker(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
