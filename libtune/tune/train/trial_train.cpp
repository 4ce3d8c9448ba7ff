#include "tune/train/trial_train.hpp"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <sstream>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

namespace tune::train {

namespace {

// Seconds since this process started (/proc: its start in clock ticks after boot, and
// the time since boot); -1 when /proc cannot say. Reported with each epoch, so that a
// run's timeline shows what a trial spends before its first epoch (process start,
// CUDA context, data load).
double process_age_s() {
  std::ifstream stat("/proc/self/stat"), up("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');  // the command name may hold spaces
  double uptime = 0;
  if (close == std::string::npos || !(up >> uptime)) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  for (int i = 3; i < 22 && fields >> f; ++i) {
  }
  unsigned long long start = 0;
  if (!(fields >> start)) return -1;
  return uptime - static_cast<double>(start) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace

expected<std::string> train_trial(trial_context& ctx) {
  // Every key is optional; one of the wrong type (e.g. "lr": "0.1") is an error that
  // names it, never silently the default.
  hyperparameters hp;
  std::string bad;
  auto take = [&](auto got, auto& into) {
    if (!got) {
      if (bad.empty()) bad = got.error().message();
      return;
    }
    into = static_cast<std::remove_reference_t<decltype(into)>>(*got);
  };
  take(ctx.text_or("model", hp.model), hp.model);
  take(ctx.number_or("lr", hp.lr), hp.lr);
  take(ctx.number_or("momentum", hp.momentum), hp.momentum);
  take(ctx.number_or("weight_decay", hp.weight_decay), hp.weight_decay);
  take(ctx.integer_or("batch_size", hp.batch_size), hp.batch_size);
  take(ctx.integer_or("width", hp.width), hp.width);
  take(ctx.integer_or("depth", hp.depth), hp.depth);
  take(ctx.integer_or("epochs", hp.epochs), hp.epochs);
  take(ctx.integer_or("seed", static_cast<int64_t>(hp.seed)), hp.seed);
  take(ctx.text_or("schedule", hp.schedule), hp.schedule);
  take(ctx.flag_or("tf32", false), hp.tf32);
  bool data_parallel = true;
  take(ctx.flag_or("data_parallel", true), data_parallel);
  std::string device, data_dir;
  take(ctx.text_or("device", ""), device);
  take(ctx.text_or("data", ""), data_dir);
  if (!bad.empty()) return status{errc::invalid_argument, "bad configuration: " + bad};
  if (auto ok = hp.check(); !ok) return status{errc::invalid_argument, "bad configuration: " + ok.message()};
  // The trial's real cards, as CUDA numbers them inside the trial (declared, logical
  // GPUs have no device behind them).
  std::vector<int> cards;
  for (const auto& g : ctx.gpus())
    if (!g.logical) cards.push_back(g.local);
  train_options opt;
  opt.device.cuda = !cards.empty() && device != "cpu" && cuda_device_count() > 0;
  if (opt.device.cuda) {
    opt.device.index = cards[0];  // the trial's first card, whatever its number on the machine
    if (data_parallel && cards.size() >= 2) opt.device.indices = cards;
  }
  auto load_start = std::chrono::steady_clock::now();
  // A reused worker (tune/trial/reuse.hpp) started long ago: its trial's start is from
  // here, not from the process's.
  const bool reused = std::getenv("TUNE_WORKER_REUSED") != nullptr;
  auto data = load_fashion_mnist(data_dir);
  if (!data) return data.error();
  const double data_load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  // The node's stop request (SIGTERM) becomes the trainer's stop flag.
  std::atomic<bool> stop{false}, finished{false};
  std::thread watch([&] {
    while (!finished) {
      if (trial_context::should_stop()) stop = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  opt.stop = &stop;
  status report_failed = status::ok();
  opt.on_epoch = [&](const epoch_report& r) {
    std::map<std::string, double> m{{"epoch", r.epoch},           {"train_loss", r.train_loss},
                                    {"train_acc", r.train_acc},   {"val_loss", r.val_loss},
                                    {"val_acc", r.val_acc},       {"samples_per_s", r.samples_per_s},
                                    {"devices", r.devices}, {"epoch_s", r.seconds}};
    if (r.epoch == 1) {  // where a trial's start went (bench/timeline.py)
      m["data_load_s"] = data_load_s;
      if (reused) m["process_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
      else if (auto age = process_age_s(); age >= 0) m["process_s"] = age;
      m["worker_reused"] = reused ? 1 : 0;
    }
    if (std::isfinite(r.test_acc)) {
      m["test_acc"] = r.test_acc;
      m["test_loss"] = r.test_loss;
    }
    if (auto st = ctx.report(m); !st) report_failed = st;
    return !stop && report_failed;
  };
  auto result = train(hp, *data, opt);
  finished = true;
  watch.join();
  if (!result) return result.error();
  if (!report_failed) return status{report_failed.code(), "reporting to the node: " + report_failed.message()};
  nlohmann::json summary{{"device", result->device},  {"devices", result->devices}, {"epochs", result->epochs},
                         {"stopped", result->stopped}, {"val_acc", result->val_acc},
                         {"samples_per_s", result->samples_per_s}, {"seconds", result->seconds}};
  if (std::isfinite(result->test_acc)) summary["test_acc"] = result->test_acc;
  return summary.dump();
}

}  // namespace tune::train
