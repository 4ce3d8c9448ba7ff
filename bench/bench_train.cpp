// bench_train: libtune's trainer against PyTorch eager on one GPU, same models, data,
// batch size (128) and epochs, in the same run. The last line is JSON:
// mlp_speedup, cnn_speedup (ours / PyTorch samples per second), the four test
// accuracies and the raw samples per second. Targets (H200): MLP >= 3x, CNN >= 1.5x,
// equal accuracy. Without a GPU it says so and exits 0.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "tune/train/trainer.hpp"

using namespace tune::train;

namespace {

struct run {
  double samples_per_s = 0, test_acc = 0;
  bool ok = false;
};

// Runs the baseline script and takes its last JSON line.
run torch_run(const std::string& python, const std::string& script, const std::string& model, int epochs,
              const std::string& data_dir, bool tf32) {
  std::string cmd = python + " '" + script + "' --model " + model + " --epochs " + std::to_string(epochs) +
                    " --data '" + data_dir + "'" + (tf32 ? " --tf32" : "") + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  run r;
  if (!p) return r;
  char line[4096];
  std::string last;
  while (std::fgets(line, sizeof line, p)) {
    std::printf("  torch %s: %s", model.c_str(), line);
    if (line[0] == '{') last = line;
  }
  int rc = ::pclose(p);
  if (rc != 0 || last.empty()) {
    std::printf("  torch %s: the baseline failed (exit %d): is torch installed for %s?\n", model.c_str(), rc,
                python.c_str());
    return r;
  }
  auto j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded()) return r;
  r.samples_per_s = j.value("samples_per_s", 0.0);
  r.test_acc = j.value("test_acc", 0.0);
  r.ok = true;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 5;
  bool tf32 = false, skip_torch = false;
  std::string data_dir, python = "python3", script = TORCH_BASELINE;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string{argv[++i]} : std::string{}; };
    if (a == "--epochs") epochs = std::atoi(next().c_str());
    else if (a == "--data") data_dir = next();
    else if (a == "--python") python = next();
    else if (a == "--torch-script") script = next();
    else if (a == "--tf32") tf32 = true;
    else if (a == "--skip-torch") skip_torch = true;
    else {
      std::cout << "usage: bench_train [--epochs N] [--data DIR] [--tf32] [--python PY] [--torch-script PATH] "
                   "[--skip-torch]\n";
      return a == "--help" ? 0 : 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::cout << "bench_train: no CUDA device here (or libtune built without CUDA): the comparison is for a GPU "
                 "machine; nothing measured\n";
    return 0;
  }
  if (!std::filesystem::exists(script) && std::filesystem::exists("bench/torch_baseline.py"))
    script = "bench/torch_baseline.py";  // the binary was moved with the repository
  data_dir = fashion_mnist_dir(data_dir);
  auto data = load_fashion_mnist(data_dir);
  if (!data) {
    std::cerr << "bench_train: " << data.error().message() << "\n";
    return 1;
  }
  nlohmann::json out;
  run ours[2], theirs[2];
  const char* models[2] = {"mlp", "cnn"};
  for (int m = 0; m < 2; ++m) {
    hyperparameters hp;
    hp.model = models[m];
    hp.epochs = epochs;
    hp.batch_size = 128;
    hp.tf32 = tf32;
    train_options o;
    o.device = {true, 0};
    o.on_epoch = [&](const epoch_report& r) {
      std::printf("  libtune %s: epoch %d val_acc %.4f %.0f samples/s\n", models[m], r.epoch, r.val_acc,
                  r.samples_per_s);
      return true;
    };
    auto r = train(hp, *data, o);
    if (!r) {
      std::cerr << "bench_train: " << models[m] << ": " << r.error().message() << "\n";
      return 1;
    }
    ours[m] = {r->samples_per_s, r->test_acc, true};
    std::printf("libtune %s: %.0f samples/s, test_acc %.4f\n", models[m], r->samples_per_s, r->test_acc);
    if (!skip_torch) theirs[m] = torch_run(python, script, models[m], epochs, data_dir, tf32);
    std::string k = models[m];
    out[k + "_samples_per_s"] = ours[m].samples_per_s;
    out[k + "_test_acc"] = ours[m].test_acc;
    if (theirs[m].ok) {
      out["torch_" + k + "_samples_per_s"] = theirs[m].samples_per_s;
      out["torch_" + k + "_test_acc"] = theirs[m].test_acc;
      out[k + "_speedup"] = ours[m].samples_per_s / theirs[m].samples_per_s;
    } else {
      out["torch_" + k + "_test_acc"] = nullptr;
      out[k + "_speedup"] = nullptr;
    }
  }
  out["epochs"] = epochs;
  out["batch_size"] = 128;
  out["tf32"] = tf32;
  std::cout << out.dump() << std::endl;
  return 0;
}
