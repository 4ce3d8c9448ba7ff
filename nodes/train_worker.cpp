// tune-train-worker: the trial worker for libtune's own training workload. A node
// runs it as a trial (it reads everything from its trial context): it trains the
// Fashion-MNIST MLP or CNN with the trial's configuration on the trial's real cards
// (CUDA devices 0..k-1 inside the trial): one card, or data-parallel over all k when
// the trial holds 2 or more (batch_size is then the whole step's batch, split across
// the cards); on the CPU when the trial holds no real card. It reports every epoch
// (with "devices": how many devices the steps ran on) and stops within a step when the
// node asks it to.
//
// Configuration keys (all optional): model ("mlp" | "cnn"), lr, momentum,
// weight_decay, batch_size, width, depth, epochs, seed, schedule, tf32 (true | false, or 1 | 0),
// device ("cpu" to force the CPU), data_parallel (true | false, or 1 | 0; default
// true: false trains on the trial's first card only).
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tune/train/trainer.hpp"
#include "tune/trial/context.hpp"

using namespace tune;

int main() {
  auto ctx = trial_context::from_environment();
  if (!ctx) {
    std::cerr << "tune-train-worker: " << ctx.error().message() << "\n";
    return 2;
  }
  // Every key is optional; one of the wrong type (e.g. "lr": "0.1") is an error that
  // names it, never silently the default.
  train::hyperparameters hp;
  std::string bad;
  auto take = [&](auto got, auto& into) {
    if (!got) {
      if (bad.empty()) bad = got.error().message();
      return;
    }
    into = static_cast<std::remove_reference_t<decltype(into)>>(*got);
  };
  take(ctx->text_or("model", hp.model), hp.model);
  take(ctx->number_or("lr", hp.lr), hp.lr);
  take(ctx->number_or("momentum", hp.momentum), hp.momentum);
  take(ctx->number_or("weight_decay", hp.weight_decay), hp.weight_decay);
  take(ctx->integer_or("batch_size", hp.batch_size), hp.batch_size);
  take(ctx->integer_or("width", hp.width), hp.width);
  take(ctx->integer_or("depth", hp.depth), hp.depth);
  take(ctx->integer_or("epochs", hp.epochs), hp.epochs);
  take(ctx->integer_or("seed", static_cast<int64_t>(hp.seed)), hp.seed);
  take(ctx->text_or("schedule", hp.schedule), hp.schedule);
  take(ctx->flag_or("tf32", false), hp.tf32);
  bool data_parallel = true;
  take(ctx->flag_or("data_parallel", true), data_parallel);
  std::string device;
  take(ctx->text_or("device", ""), device);
  if (!bad.empty()) {
    std::cerr << "tune-train-worker: bad configuration: " << bad << "\n";
    return 2;
  }
  if (auto ok = hp.check(); !ok) {
    std::cerr << "tune-train-worker: bad configuration: " << ok.message() << "\n";
    return 2;
  }
  // The trial's real cards, as CUDA numbers them inside the trial (declared, logical
  // GPUs have no device behind them).
  std::vector<int> cards;
  for (const auto& g : ctx->gpus())
    if (!g.logical) cards.push_back(g.local);
  train::train_options opt;
  opt.device.cuda = !cards.empty() && device != "cpu" && train::cuda_device_count() > 0;
  if (opt.device.cuda) {
    opt.device.index = cards[0];  // the trial's first card, whatever its number on the machine
    if (data_parallel && cards.size() >= 2) opt.device.indices = cards;
  }
  auto data = train::load_fashion_mnist();
  if (!data) {
    std::cerr << "tune-train-worker: " << data.error().message() << "\n";
    return 2;
  }
  // The node's stop request (SIGTERM) becomes the trainer's stop flag.
  std::atomic<bool> stop{false}, finished{false};
  std::thread watch([&] {
    while (!finished) {
      if (trial_context::should_stop()) stop = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  opt.stop = &stop;
  opt.on_epoch = [&](const train::epoch_report& r) {
    auto st = ctx->report({{"epoch", r.epoch},
                           {"train_loss", r.train_loss},
                           {"train_acc", r.train_acc},
                           {"val_loss", r.val_loss},
                           {"val_acc", r.val_acc},
                           {"samples_per_s", r.samples_per_s},
                           {"devices", r.devices}});
    if (!st) std::cerr << "tune-train-worker: " << st.message() << "\n";
    return !stop;
  };
  auto result = train::train(hp, *data, opt);
  finished = true;
  watch.join();
  if (!result) {
    std::cerr << "tune-train-worker: " << result.error().message() << "\n";
    return 1;
  }
  nlohmann::json summary{{"device", result->device},  {"devices", result->devices}, {"epochs", result->epochs},
                         {"stopped", result->stopped}, {"val_acc", result->val_acc},
                         {"samples_per_s", result->samples_per_s}, {"seconds", result->seconds}};
  if (std::isfinite(result->test_acc)) summary["test_acc"] = result->test_acc;
  (void)ctx->done(summary.dump());
  return 0;
}
