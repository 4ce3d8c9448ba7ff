// Data-parallel training over several CUDA devices against one device.
// - DeviceSpec.*: the device syntax (cuda:N,M,..., cuda:all); CPU only, runs in CI.
// - DataParallel.*: need 2+ CUDA devices and skip (saying so) with fewer. They compare
//   a data-parallel backend with the one-device backend on the first of its devices:
//   the reduced gradient, one SGD step (odd batches, a batch smaller than the number of
//   devices, so a replica gets no rows), whole epochs (captured graphs, partial last
//   batch), the replicas' parameters (identical, bit for bit), and one real epoch.
//   Both ways a gradient travels are run: peer access (where the devices have it) and
//   the cudaMemcpyPeerAsync copies (TUNE_TRAIN_NO_PEER=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>

#include "tune/train/backend.hpp"
#include "tune/train/rng.hpp"
#include "tune/train/test_util.hpp"
#include "tune/train/trainer.hpp"

namespace tune::train {
namespace {

// ---- the device syntax (no GPU needed) ------------------------------------------

TEST(DeviceSpec, OneDeviceParsesAsBefore) {
  auto cpu = parse_device("cpu");
  ASSERT_TRUE(cpu);
  EXPECT_FALSE(cpu->cuda);
  EXPECT_TRUE(cpu->devices().empty());
  EXPECT_EQ(cpu->to_string(), "cpu");
  for (const char* text : {"cuda", "gpu", "cuda:0"}) {
    auto d = parse_device(text);
    ASSERT_TRUE(d) << text;
    EXPECT_TRUE(d->cuda);
    EXPECT_EQ(d->index, 0);
    EXPECT_TRUE(d->indices.empty());
    EXPECT_EQ(d->devices(), std::vector<int>{0});
    EXPECT_EQ(d->to_string(), "cuda:0");
  }
  auto three = parse_device("gpu:3");
  ASSERT_TRUE(three);
  EXPECT_EQ(three->index, 3);
  EXPECT_EQ(three->devices(), std::vector<int>{3});
  EXPECT_EQ(three->to_string(), "cuda:3");
  // What existing callers write still means one device.
  EXPECT_EQ((device_spec{true, 2}.devices()), std::vector<int>{2});
  EXPECT_EQ(device_spec{}.to_string(), "cpu");
}

TEST(DeviceSpec, ListsParseInOrder) {
  auto two = parse_device("cuda:0,1");
  ASSERT_TRUE(two) << two.error().message();
  EXPECT_TRUE(two->cuda);
  EXPECT_EQ(two->index, 0);
  EXPECT_EQ(two->devices(), (std::vector<int>{0, 1}));
  EXPECT_EQ(two->to_string(), "cuda:0,1");
  auto three = parse_device("gpu:2,0,1");
  ASSERT_TRUE(three) << three.error().message();
  EXPECT_EQ(three->index, 2);
  EXPECT_EQ(three->devices(), (std::vector<int>{2, 0, 1}));
  auto again = parse_device(three->to_string());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->devices(), three->devices());
  // A list of one is one device.
  auto one = parse_device("cuda:5");
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->indices.empty());
}

TEST(DeviceSpec, AllMeansEveryVisibleDevice) {
  auto all = parse_device("cuda:all");
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_TRUE(all->cuda);
  EXPECT_TRUE(all->all);
  EXPECT_EQ(all->to_string(), "cuda:all");
  const auto devices = all->devices();
  ASSERT_EQ(static_cast<int>(devices.size()), cuda_device_count());
  for (size_t i = 0; i < devices.size(); ++i) EXPECT_EQ(devices[i], static_cast<int>(i));
}

TEST(DeviceSpec, BadListsAreNamed) {
  for (const char* text : {"cuda:0,0", "cuda:1,2,1", "cuda:0,", "cuda:,1", "cuda:-1", "cuda:0,-1", "cuda:1,x",
                           "cuda:", "cuda:all,1", "cuda:0;1", "tpu", "cuda0"}) {
    auto d = parse_device(text);
    EXPECT_FALSE(d) << text << " was accepted as " << d->to_string();
    if (!d) {
      EXPECT_NE(d.error().message().find(text), std::string::npos) << d.error().message();
      EXPECT_NE(d.error().message().find("cuda:N,M"), std::string::npos) << d.error().message();
    }
  }
  auto twice = parse_device("cuda:0,1,0");
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message().find("device 0 appears twice"), std::string::npos) << twice.error().message();
}

// Where there are not two devices (CI, a one-GPU machine), asking for two is an error
// that names what was asked for.
TEST(DataParallel, TooFewDevicesIsAnError) {
  if (cuda_device_count() >= 2) GTEST_SKIP() << "this process sees 2+ CUDA devices";
  hyperparameters hp;
  auto spec = parse_device("cuda:0,1");
  ASSERT_TRUE(spec);
  auto b = make_backend(hp, describe(hp), *spec);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("cuda:0,1"), std::string::npos) << b.error().message();
}

// ---- on 2+ devices ---------------------------------------------------------------

const char* visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "unset";
}

#define SKIP_WITHOUT_TWO_GPUS()                                                                          \
  if (cuda_device_count() < 2)                                                                           \
  GTEST_SKIP() << "data-parallel tests need 2 CUDA devices; this process sees " << cuda_device_count() \
               << " (CUDA_VISIBLE_DEVICES=" << visible_devices() << ")"

// The device lists to compare with one device: {0, 1}, and every device when there are
// more than two.
std::vector<std::vector<int>> device_lists() {
  std::vector<std::vector<int>> lists{{0, 1}};
  if (cuda_device_count() > 2) {
    std::vector<int> all;
    for (int i = 0; i < cuda_device_count(); ++i) all.push_back(i);
    lists.push_back(all);
  }
  return lists;
}

const char* mode_name(bool peer) { return peer ? "peer access" : "cudaMemcpyPeer copies"; }

// A data-parallel backend whose gradients travel by peer access (where the devices
// allow it, and unless the whole run has TUNE_TRAIN_NO_PEER=1) or, with peer = false,
// by cudaMemcpyPeerAsync into copies on device 0. Peer access, once enabled by an
// earlier backend, stays on in the process, so those copies are then direct; a run
// with TUNE_TRAIN_NO_PEER=1 never enables it and the copies go the driver's other way.
expected<std::unique_ptr<backend>> make_dp(const hyperparameters& hp, const network& net,
                                           const std::vector<int>& devices, bool peer) {
  const char* before = std::getenv("TUNE_TRAIN_NO_PEER");
  const std::string saved = before ? before : "";
  if (!peer) setenv("TUNE_TRAIN_NO_PEER", "1", 1);
  device_spec spec{true, devices[0]};
  spec.indices = devices;
  auto b = make_backend(hp, net, spec);
  if (before) setenv("TUNE_TRAIN_NO_PEER", saved.c_str(), 1);
  else unsetenv("TUNE_TRAIN_NO_PEER");
  if (b) {
    EXPECT_EQ((*b)->devices(), static_cast<int>(devices.size()));
    EXPECT_NE((*b)->name().find("data-parallel"), std::string::npos) << (*b)->name();
    if (!peer) {
      EXPECT_NE((*b)->name().find("copied with cudaMemcpyPeer"), std::string::npos)
          << "TUNE_TRAIN_NO_PEER=1 should force the copies: " << (*b)->name();
    }
  }
  return b;
}

image_set random_images(int count, uint64_t seed) {
  image_set d;
  d.count = count;
  d.rows = d.cols = 28;
  rng r{seed};
  for (int i = 0; i < count * 784; ++i) d.pixels.push_back(uint8_t(r.below(256)));
  for (int i = 0; i < count; ++i) d.labels.push_back(uint8_t(r.below(10)));
  return d;
}

std::vector<float> normalised(const image_set& d) {
  std::vector<float> x(d.pixels.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = normalise(d.pixels[i]);
  return x;
}

// Rows whose loss gradient does not jump under rounding-sized changes. ReLU and max
// pooling choose between candidates; where two are within ~1e-7 of each other, two
// correct float computations (one device, or the same rows split over two devices
// with other cuDNN algorithms) may choose differently, and one such choice moves a
// CNN's convolution gradients by ~5e-4 (seen on an H200 with 128 random rows: the
// CPU on one side, one device and two devices on the other, and once one device and
// two devices apart). Those rows say nothing about the reduction, so a batch is used
// only when the CPU's own gradient moves by less than 1e-5 per layer when the inputs
// move by 1e-6 (relative, two random directions): next seed otherwise.
expected<image_set> tie_free_images(const hyperparameters& hp, const network& net, const std::vector<float>& w, int n,
                                    uint64_t seed) {
  hyperparameters cpu_hp = hp;
  cpu_hp.batch_size = std::max(hp.batch_size, n);
  auto cpu = make_cpu_backend(cpu_hp, net);
  if (!cpu) return cpu.error();
  if (auto st = (*cpu)->set_parameters(w); !st) return st;
  for (int attempt = 0; attempt < 20; ++attempt) {
    image_set d = random_images(n, seed + 1000 * attempt);
    const auto x = normalised(d);
    const std::vector<int32_t> y(d.labels.begin(), d.labels.end());
    std::vector<float> g, gp;
    if (auto l = (*cpu)->loss_and_gradient(x, y, n, &g, nullptr); !l) return l.error();
    bool steady = true;
    rng q{seed + attempt};
    for (int k = 0; k < 2 && steady; ++k) {
      auto xp = x;
      for (auto& v : xp) v *= 1 + 1e-6f * static_cast<float>(q.normal());
      if (auto l = (*cpu)->loss_and_gradient(xp, y, n, &gp, nullptr); !l) return l.error();
      for (const auto& l : net.layers)
        steady = steady && rel_err(gp.data() + l.weight_offset, g.data() + l.weight_offset, l.weight_count()) < 1e-5 &&
                 rel_err(gp.data() + l.bias_offset, g.data() + l.bias_offset, l.out) < 1e-5;
    }
    if (steady) return d;
  }
  return status{errc::not_found, "20 random batches of " + std::to_string(n) + " rows all had near-ties"};
}

// Every replica holds exactly replica 0's parameters.
void expect_replicas_identical(backend& dp, const std::string& what) {
  auto p0 = dp.replica_parameters(0);
  ASSERT_TRUE(p0) << p0.error().message();
  for (int r = 1; r < dp.devices(); ++r) {
    auto pr = dp.replica_parameters(r);
    ASSERT_TRUE(pr) << pr.error().message();
    ASSERT_EQ(pr->size(), p0->size());
    size_t differ = 0;
    for (size_t i = 0; i < p0->size(); ++i) differ += std::memcmp(&(*p0)[i], &(*pr)[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << what << ": replica " << r << " differs from replica 0 in " << differ << " of "
                          << p0->size() << " parameters";
  }
}

// The reduced gradient (each share's gradient weighted by its rows) is the full batch's
// mean gradient. On the CPU, weighting right is 2e-7 from the full batch and weighting
// the two halves of 127 rows equally 1.5e-3..2.5e-3 (measured): 1e-5 separates them.
TEST(DataParallel, GradientMatchesOneDevice) {
  SKIP_WITHOUT_TWO_GPUS();
  for (const char* m : {"mlp", "cnn"})
    for (int n : {127, 128, 3, 1}) {
      hyperparameters hp;
      hp.model = m;
      hp.batch_size = 128;
      auto net = describe(hp);
      const auto w = init_parameters(net, 11);
      auto images = tie_free_images(hp, net, w, n, 300 + n);
      ASSERT_TRUE(images) << images.error().message();
      const auto x = normalised(*images);
      const std::vector<int32_t> y(images->labels.begin(), images->labels.end());
      for (const auto& devices : device_lists())
        for (bool peer : {true, false}) {
          SCOPED_TRACE(std::string{m} + " on " + std::to_string(devices.size()) + " devices, " + mode_name(peer) +
                       ", n = " + std::to_string(n));
          auto one = make_cuda_backend(hp, net, devices[0]);
          ASSERT_TRUE(one) << one.error().message();
          auto dp = make_dp(hp, net, devices, peer);
          ASSERT_TRUE(dp) << dp.error().message();
          ASSERT_TRUE((*one)->set_parameters(w));
          ASSERT_TRUE((*dp)->set_parameters(w));
          std::vector<float> g1, gd, l1, ld;
          auto loss1 = (*one)->loss_and_gradient(x, y, n, &g1, &l1);
          auto lossd = (*dp)->loss_and_gradient(x, y, n, &gd, &ld);
          ASSERT_TRUE(loss1) << loss1.error().message();
          ASSERT_TRUE(lossd) << lossd.error().message();
          EXPECT_NEAR(*lossd, *loss1, 1e-5 * std::abs(*loss1));
          ASSERT_EQ(ld.size(), l1.size());
          EXPECT_LE(rel_err(ld.data(), l1.data(), l1.size()), 1e-5) << "logits";
          ASSERT_EQ(gd.size(), g1.size());
          double worst = 0;
          for (size_t li = 0; li < net.layers.size(); ++li) {
            const auto& l = net.layers[li];
            const double we = rel_err(gd.data() + l.weight_offset, g1.data() + l.weight_offset, l.weight_count());
            const double be = rel_err(gd.data() + l.bias_offset, g1.data() + l.bias_offset, l.out);
            EXPECT_LE(we, 1e-5) << "layer " << li << " weight gradient";
            EXPECT_LE(be, 1e-5) << "layer " << li << " bias gradient";
            worst = std::max({worst, we, be});
          }
          std::printf("  %s, %zu devices, %s, n = %d: gradient within %.1e of one device's (per layer)\n", m,
                      devices.size(), mode_name(peer), n, worst);
        }
    }
}

// One SGD step (momentum and weight decay on) over a fixed batch of n rows: the
// parameters equal one device's to 1e-5. The change of the parameters, which is what
// a wrong gradient would move, must agree to 1e-4 (float rounding of w - lr v leaves
// at most ~6e-6 of it here, as |lr v| / |w| >= 0.01; equal weights for the halves of
// 127 rows would be off by ~2e-3). n = 1 leaves the second device without rows.
TEST(DataParallel, OneStepMatchesOneDevice) {
  SKIP_WITHOUT_TWO_GPUS();
  for (const char* m : {"mlp", "cnn"})
    for (int n : {127, 128, 3, 1}) {
      hyperparameters hp;
      hp.model = m;
      hp.batch_size = n;
      auto net = describe(hp);
      const auto w = init_parameters(net, 5);
      auto images = tie_free_images(hp, net, w, n, 100 + n);  // see there
      ASSERT_TRUE(images) << images.error().message();
      const image_set& data = *images;
      const auto order = permutation(n, 7);
      for (const auto& devices : device_lists())
        for (bool peer : {true, false}) {
          SCOPED_TRACE(std::string{m} + " on " + std::to_string(devices.size()) + " devices, " + mode_name(peer) +
                       ", batch " + std::to_string(n));
          auto one = make_cuda_backend(hp, net, devices[0]);
          ASSERT_TRUE(one) << one.error().message();
          auto dp = make_dp(hp, net, devices, peer);
          ASSERT_TRUE(dp) << dp.error().message();
          sums s[2];
          std::vector<float> p[2];
          for (int k = 0; k < 2; ++k) {
            backend& b = k ? **dp : **one;
            ASSERT_TRUE(b.set_parameters(w));
            ASSERT_TRUE(b.load(split_id::train, data));
            ASSERT_TRUE(b.begin_epoch(order, 0.05f));
            auto st = b.step(0, n);
            ASSERT_TRUE(st) << st.message();
            auto e = b.end_epoch();
            ASSERT_TRUE(e) << e.error().message();
            s[k] = *e;
            auto got = b.parameters();
            ASSERT_TRUE(got) << got.error().message();
            p[k] = *got;
          }
          EXPECT_EQ(s[1].count, n);
          EXPECT_NEAR(s[1].loss, s[0].loss, 1e-5 * std::abs(s[0].loss)) << "the step's loss sum";
          EXPECT_EQ(s[1].correct, s[0].correct);
          std::vector<float> d1(w.size()), dd(w.size());
          for (size_t i = 0; i < w.size(); ++i) {
            d1[i] = p[0][i] - w[i];
            dd[i] = p[1][i] - w[i];
          }
          const double pe = rel_err(p[1].data(), p[0].data(), w.size());
          const double ue = rel_err(dd.data(), d1.data(), w.size());
          std::printf("  %s, %zu devices, %s, batch %d: parameters within %.1e, their change within %.1e\n", m,
                      devices.size(), mode_name(peer), n, pe, ue);
          EXPECT_LE(pe, 1e-5) << "parameters";
          EXPECT_LE(ue, 1e-4) << "the step's change of the parameters";
          expect_replicas_identical(**dp, "after one step");
        }
    }
}

// Three epochs over 3.5 batches (first steps eager, then captured graphs, the partial
// last batch with its own shares and graphs), batch 16 (shares 8 + 8, last 4 + 4 on two
// devices) and 15 (8 + 7, last 6 + 5): the epoch sums, the parameters, evaluation and
// the replicas. After 12 steps rounding differences have compounded a little, so the
// parameters are compared to 1e-4 (one device against the CPU: 1e-3, gpu_test.cpp).
TEST(DataParallel, EpochsMatchOneDeviceAndReplicasStayIdentical) {
  SKIP_WITHOUT_TWO_GPUS();
  for (const char* m : {"mlp", "cnn"})
    for (const auto& devices : device_lists())
      for (bool peer : {true, false})
        for (int batch : {16, 15}) {
          SCOPED_TRACE(std::string{m} + " on " + std::to_string(devices.size()) + " devices, " + mode_name(peer) +
                       ", batch " + std::to_string(batch));
          hyperparameters hp;
          hp.model = m;
          hp.batch_size = batch;
          auto net = describe(hp);
          auto one = make_cuda_backend(hp, net, devices[0]);
          ASSERT_TRUE(one) << one.error().message();
          auto dp = make_dp(hp, net, devices, peer);
          ASSERT_TRUE(dp) << dp.error().message();
          const auto data = random_images(56, 5);
          const auto w = init_parameters(net, 2);
          for (auto* b : {&**one, &**dp}) {
            ASSERT_TRUE(b->set_parameters(w));
            ASSERT_TRUE(b->load(split_id::train, data));
            ASSERT_TRUE(b->load(split_id::validation, data));
            ASSERT_TRUE(b->load(split_id::test, data));
          }
          expect_replicas_identical(**dp, "after set_parameters");
          for (int epoch = 0; epoch < 3; ++epoch) {
            const auto order = permutation(56, epoch);
            sums s[2];
            for (int k = 0; k < 2; ++k) {
              backend& b = k ? **dp : **one;
              ASSERT_TRUE(b.begin_epoch(order, 0.05f));
              for (int first = 0; first < 56; first += batch) {
                auto st = b.step(first, std::min(batch, 56 - first));
                ASSERT_TRUE(st) << st.message();
              }
              auto e = b.end_epoch();
              ASSERT_TRUE(e) << e.error().message();
              s[k] = *e;
            }
            EXPECT_EQ(s[1].count, 56);
            EXPECT_NEAR(s[1].loss, s[0].loss, 1e-4 * std::abs(s[0].loss)) << "epoch " << epoch;
            EXPECT_NEAR(double(s[1].correct), double(s[0].correct), 1.0) << "epoch " << epoch;
            expect_replicas_identical(**dp, "after epoch " + std::to_string(epoch));
          }
          auto p1 = (*one)->parameters();
          auto pd = (*dp)->parameters();
          ASSERT_TRUE(p1 && pd);
          const double e = rel_err(pd->data(), p1->data(), p1->size());
          std::printf("  %s, %zu devices, %s, batch %d: parameters after 3 epochs differ by %.2e\n", m,
                      devices.size(), mode_name(peer), batch, e);
          EXPECT_LE(e, 1e-4);
          auto e1 = (*one)->evaluate(split_id::test);
          auto ed = (*dp)->evaluate(split_id::test);
          ASSERT_TRUE(e1 && ed);
          EXPECT_EQ(ed->count, 56);
          EXPECT_NEAR(ed->loss, e1->loss, 1e-4 * std::abs(e1->loss));
        }
}

// The whole path (trainer, data-parallel backend, real data): one epoch of the MLP with
// defaults on two devices reaches the one-device validation accuracy within 0.01.
TEST(DataParallel, OneEpochMlpMatchesOneDevice) {
  SKIP_WITHOUT_TWO_GPUS();
  auto data = load_fashion_mnist();
  ASSERT_TRUE(data) << data.error().message();
  hyperparameters hp;
  hp.epochs = 1;
  train_result r[2];
  int reported_devices[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    train_options o;
    o.device = k ? *parse_device("cuda:0,1") : device_spec{true, 0};
    o.on_epoch = [&, k](const epoch_report& e) {
      reported_devices[k] = e.devices;
      return true;
    };
    auto got = train(hp, *data, o);
    ASSERT_TRUE(got) << got.error().message();
    r[k] = *got;
    std::printf("  %s: val_acc %.4f test_acc %.4f, %.0f samples/s, %.2f s\n", got->device.c_str(), got->val_acc,
                got->test_acc, got->samples_per_s, got->seconds);
  }
  EXPECT_EQ(r[0].devices, 1);
  EXPECT_EQ(r[1].devices, 2);
  EXPECT_EQ(reported_devices[1], 2);
  EXPECT_EQ(r[1].epochs, 1);
  EXPECT_NEAR(r[1].val_acc, r[0].val_acc, 0.01);
  EXPECT_GT(r[1].val_acc, 0.8);  // one epoch of the MLP: 0.869 on the CPU
}

}  // namespace
}  // namespace tune::train
