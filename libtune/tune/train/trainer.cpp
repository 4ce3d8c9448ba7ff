#include "tune/train/trainer.hpp"

#include <chrono>
#include <cmath>

namespace tune::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The model for hp on the device, initialised from hp.seed, with the train split
// loaded and, with `all_splits`, the validation and test splits too.
expected<std::unique_ptr<backend>> set_up(const hyperparameters& hp, const fashion_mnist& data,
                                          const device_spec& device, bool all_splits) {
  if (auto s = hp.check(); !s) return s;
  if (data.train.count == 0) return status{errc::invalid_argument, "the train split is empty: load the data first"};
  const network net = describe(hp, data.train.rows, data.train.cols, num_classes);
  auto made = make_backend(hp, net, device);
  if (!made) return made.error();
  backend& b = **made;
  if (auto s = b.set_parameters(init_parameters(net, hp.seed)); !s) return s;
  if (auto s = b.load(split_id::train, data.train); !s) return s;
  if (all_splits)
    for (auto [which, set] : {std::pair{split_id::validation, &data.validation}, std::pair{split_id::test, &data.test}})
      if (auto s = b.load(which, *set); !s) return s;
  return made;
}

}  // namespace

expected<train_result> train(const hyperparameters& hp, const fashion_mnist& data, const train_options& options) {
  const auto start = std::chrono::steady_clock::now();
  auto made = set_up(hp, data, options.device, true);
  if (!made) return made.error();
  backend& b = **made;

  train_result result;
  result.device = b.name();
  result.devices = b.devices();
  double train_seconds = 0;
  int64_t train_samples = 0;
  auto stop_requested = [&] { return options.stop && options.stop->load(std::memory_order_relaxed); };
  for (int epoch = 1; epoch <= hp.epochs && !result.stopped; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    // A new order each epoch, fixed by the seed: runs are repeatable.
    auto order = permutation(data.train.count, hp.seed * 1000003ULL + static_cast<uint64_t>(epoch));
    if (auto s = b.begin_epoch(order, static_cast<float>(hp.lr_at(epoch - 1))); !s) return s;
    for (int64_t first = 0; first < data.train.count; first += hp.batch_size) {
      if (stop_requested()) {
        result.stopped = true;
        break;
      }
      int n = static_cast<int>(std::min<int64_t>(hp.batch_size, data.train.count - first));
      if (auto s = b.step(first, n); !s) return s;
    }
    auto train_sums = b.end_epoch();  // the GPU's one synchronisation of the epoch
    if (!train_sums) return train_sums.error();
    const double step_seconds = seconds_since(epoch_start);
    if (result.stopped) break;  // a partial epoch is not reported
    train_seconds += step_seconds;
    train_samples += train_sums->count;
    auto val = b.evaluate(split_id::validation);
    if (!val) return val.error();
    epoch_report r;
    r.epoch = epoch;
    r.devices = result.devices;
    r.train_loss = train_sums->loss / std::max<int64_t>(1, train_sums->count);
    r.train_acc = double(train_sums->correct) / std::max<int64_t>(1, train_sums->count);
    r.val_loss = val->loss / std::max<int64_t>(1, val->count);
    r.val_acc = double(val->correct) / std::max<int64_t>(1, val->count);
    r.samples_per_s = train_sums->count / std::max(step_seconds, 1e-9);
    r.seconds = seconds_since(epoch_start);
    result.epochs = epoch;
    result.val_acc = r.val_acc;
    if (!std::isfinite(r.train_loss))
      return status{errc::invalid_argument, "training diverged (loss " + std::to_string(r.train_loss) +
                                                " in epoch " + std::to_string(epoch) + "): lower lr (" +
                                                std::to_string(hp.lr) + ")"};
    if (epoch == hp.epochs) {  // the last epoch: tested before it is reported
      auto test = b.evaluate(split_id::test);
      if (!test) return test.error();
      r.test_acc = result.test_acc = double(test->correct) / std::max<int64_t>(1, test->count);
      r.test_loss = result.test_loss = test->loss / std::max<int64_t>(1, test->count);
    }
    if (options.on_epoch && !options.on_epoch(r)) result.stopped = true;
  }
  result.samples_per_s = train_samples / std::max(train_seconds, 1e-9);
  if (result.epochs < hp.epochs) result.test_acc = result.test_loss = std::nan("");  // stopped: not tested
  result.seconds = seconds_since(start);
  return result;
}

expected<std::vector<backend::op_time>> profile(const hyperparameters& hp, const fashion_mnist& data,
                                                const device_spec& device, int steps) {
  auto made = set_up(hp, data, device, false);
  if (!made) return made.error();
  backend& b = **made;
  auto order = permutation(data.train.count, hp.seed * 1000003ULL + 1);
  if (auto s = b.begin_epoch(order, static_cast<float>(hp.lr_at(0))); !s) return s;
  auto rows = b.profile_steps(steps);
  if (!rows) return rows.error();
  if (auto sums = b.end_epoch(); !sums) return sums.error();
  return rows;
}

}  // namespace tune::train
