// tune-train-worker: the trial worker for libtune's own training workload. A node runs
// it as a trial: it reads everything from its trial context and trains the
// Fashion-MNIST MLP or CNN (tune/train/trial_train.hpp lists the configuration keys).
#include <iostream>

#include "tune/train/trial_train.hpp"

int main() {
  auto ctx = tune::trial_context::from_environment();
  if (!ctx) {
    std::cerr << "tune-train-worker: " << ctx.error().message() << "\n";
    return 2;
  }
  auto summary = tune::train::train_trial(*ctx);
  if (!summary) {
    std::cerr << "tune-train-worker: " << summary.error().message() << "\n";
    return summary.error().code() == tune::errc::invalid_argument ? 2 : 1;
  }
  (void)ctx->done(*summary);
  return 0;
}
