// Libtune's own training workload as a trial: trains the Fashion-MNIST MLP or CNN with
// the trial's configuration on the trial's real cards (CUDA devices 0..k-1 inside the
// trial): one card, or data-parallel over all k when the trial holds 2 or more
// (batch_size is then the whole step's batch, split across the cards); on the CPU when
// the trial holds no real card. It reports every epoch (train_loss, train_acc,
// val_loss, val_acc, samples_per_s, devices; the last epoch also test_loss and
// test_acc) and stops within a step when the node asks it to. Used by
// `tune-train-worker` and the Fashion-MNIST example.
//
// Configuration keys (all optional): model ("mlp" | "cnn"), lr, momentum,
// weight_decay, batch_size, width, depth, epochs, seed, schedule, tf32 (true | false,
// or 1 | 0), device ("cpu" to force the CPU), data_parallel (true | false, or 1 | 0;
// default true: false trains on the trial's first card only), data (the IDX folder;
// default $TUNE_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist).
#pragma once

#include <string>

#include "tune/core/status.hpp"
#include "tune/train/trainer.hpp"
#include "tune/trial/context.hpp"

namespace tune::train {

// The summary of the run (device, epochs, stopped, val_acc, test_acc when tested, ...)
// as JSON text, or why it could not train: a bad configuration (the key named), no
// data, a device that cannot be used, a diverged run.
expected<std::string> train_trial(trial_context& ctx);

}  // namespace tune::train
