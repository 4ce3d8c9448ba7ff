// tune-train-worker: the trial worker for libtune's own training workload. A node
// runs it as a trial (it reads everything from its trial context): it trains the
// Fashion-MNIST MLP or CNN with the trial's configuration on the trial's first card
// (CUDA device 0 inside the trial), or on the CPU when the trial holds no real card,
// reports every epoch, and stops within a step when the node asks it to.
//
// Configuration keys (all optional): model ("mlp" | "cnn"), lr, momentum,
// weight_decay, batch_size, width, depth, epochs, seed, schedule, tf32 (0 | 1),
// device ("cpu" to force the CPU).
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
  train::hyperparameters hp;
  hp.model = ctx->text_or("model", hp.model);
  hp.lr = ctx->number_or("lr", hp.lr);
  hp.momentum = ctx->number_or("momentum", hp.momentum);
  hp.weight_decay = ctx->number_or("weight_decay", hp.weight_decay);
  hp.batch_size = static_cast<int>(ctx->integer_or("batch_size", hp.batch_size));
  hp.width = static_cast<int>(ctx->integer_or("width", hp.width));
  hp.depth = static_cast<int>(ctx->integer_or("depth", hp.depth));
  hp.epochs = static_cast<int>(ctx->integer_or("epochs", hp.epochs));
  hp.seed = static_cast<uint64_t>(ctx->integer_or("seed", static_cast<int64_t>(hp.seed)));
  hp.schedule = ctx->text_or("schedule", hp.schedule);
  hp.tf32 = ctx->integer_or("tf32", 0) != 0;
  if (auto ok = hp.check(); !ok) {
    std::cerr << "tune-train-worker: bad configuration: " << ok.message() << "\n";
    return 2;
  }
  bool real_card = !ctx->gpus().empty() && !ctx->gpus()[0].logical;
  train::train_options opt;
  opt.device.cuda = real_card && ctx->text_or("device", "") != "cpu" && train::cuda_device_count() > 0;
  opt.device.index = 0;  // the trial's first card, whatever its number on the machine
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
                           {"samples_per_s", r.samples_per_s}});
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
  nlohmann::json summary{{"device", result->device},  {"epochs", result->epochs},
                         {"stopped", result->stopped}, {"val_acc", result->val_acc},
                         {"samples_per_s", result->samples_per_s}, {"seconds", result->seconds}};
  if (std::isfinite(result->test_acc)) summary["test_acc"] = result->test_acc;
  (void)ctx->done(summary.dump());
  return 0;
}
