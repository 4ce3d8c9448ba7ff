// tune_train: one training run by hand. Prints a line per epoch and, last, one JSON
// line with the results. Parses its own few options (no Boost) so the binary runs on
// GPU machines that have only the CUDA libraries.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tune/train/trainer.hpp"

using namespace tune::train;

namespace {

const char* usage =
    "usage: tune_train [options]\n"
    "Trains an MLP or a small CNN on Fashion-MNIST; one line per epoch, then a JSON line.\n\n"
    "  --model mlp|cnn        mlp (default) or cnn (conv32-pool-conv64-pool-fc-fc10)\n"
    "  --epochs N             passes over the 55,000 training images (5)\n"
    "  --lr X                 learning rate (0.05)\n"
    "  --schedule S           cosine (default) or constant learning rate per epoch\n"
    "  --momentum X           SGD momentum (0.9)\n"
    "  --weight-decay X       L2 weight decay (5e-4)\n"
    "  --batch-size N         samples per step (128)\n"
    "  --width N              MLP hidden / CNN fc width; 0: 512 (mlp), 128 (cnn)\n"
    "  --depth N              MLP hidden layers (2)\n"
    "  --seed N               initialisation and shuffling seed (1)\n"
    "  --device D             cpu (default), cuda or cuda:N; cuda:N,M,... or cuda:all:\n"
    "                         data-parallel over those devices (the batch is split)\n"
    "  --tf32                 GPU: TF32 tensor cores for GEMMs and convolutions\n"
    "  --profile N            no training: where a step's time goes on one CUDA device,\n"
    "                         each part's mean over N steps (1-200), then a JSON line\n"
    "  --data DIR             the IDX files (default: $TUNE_FASHION_MNIST_DIR, else\n"
    "                         /usr/share/datasets/fashion-mnist)\n"
    "  --help                 this text\n";

template <class T>
bool parse_number(const std::string& s, T& out) {
  char* end = nullptr;
  if constexpr (std::is_floating_point_v<T>) out = static_cast<T>(std::strtod(s.c_str(), &end));
  else out = static_cast<T>(std::strtoll(s.c_str(), &end, 10));
  return !s.empty() && end && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  hyperparameters hp;
  std::string device = "cpu", data_dir;
  int profile_steps = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      return 0;
    }
    if (arg == "--tf32") {
      hp.tf32 = true;
      continue;
    }
    if (auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::cerr << "tune_train: " << arg << " needs a value (see --help)\n";
      return 2;
    }
    bool ok = true;
    if (arg == "--model") hp.model = value;
    else if (arg == "--schedule") hp.schedule = value;
    else if (arg == "--device") device = value;
    else if (arg == "--data") data_dir = value;
    else if (arg == "--epochs") ok = parse_number(value, hp.epochs);
    else if (arg == "--lr") ok = parse_number(value, hp.lr);
    else if (arg == "--momentum") ok = parse_number(value, hp.momentum);
    else if (arg == "--weight-decay") ok = parse_number(value, hp.weight_decay);
    else if (arg == "--batch-size") ok = parse_number(value, hp.batch_size);
    else if (arg == "--width") ok = parse_number(value, hp.width);
    else if (arg == "--depth") ok = parse_number(value, hp.depth);
    else if (arg == "--seed") ok = parse_number(value, hp.seed);
    else if (arg == "--profile") ok = parse_number(value, profile_steps) && profile_steps >= 1 && profile_steps <= 200;
    else {
      std::cerr << "tune_train: unknown option " << arg << " (see --help)\n";
      return 2;
    }
    if (!ok) {
      std::cerr << "tune_train: " << arg << " " << value
                << (arg == "--profile" ? " is not a number of steps from 1 to 200\n" : " is not a number\n");
      return 2;
    }
  }
  if (auto s = hp.check(); !s) {
    std::cerr << "tune_train: " << s.message() << "\n";
    return 2;
  }
  auto dev = parse_device(device);
  if (!dev) {
    std::cerr << "tune_train: " << dev.error().message() << "\n";
    return 2;
  }
  auto data = load_fashion_mnist(data_dir);
  if (!data) {
    std::cerr << "tune_train: " << data.error().message() << "\n";
    return 1;
  }
  if (profile_steps > 0) {
    auto rows = profile(hp, *data, *dev, profile_steps);
    if (!rows) {
      std::cerr << "tune_train: " << rows.error().message() << "\n";
      return 1;
    }
    nlohmann::json parts = nlohmann::json::object();
    double sum = 0;
    for (size_t i = 0; i < rows->size(); ++i) {
      const auto& r = (*rows)[i];
      const bool total = i + 1 == rows->size();
      if (!total) sum += r.us;
      else std::printf("%-44s %9.1f us\n", "sum of the parts (eager)", sum);
      std::printf("%-44s %9.1f us\n", r.op.c_str(), r.us);
      parts[r.op] = r.us;
    }
    std::cout << nlohmann::json{{"model", hp.model}, {"batch_size", hp.batch_size}, {"tf32", hp.tf32},
                                {"steps", profile_steps}, {"us", parts}}
                     .dump()
              << std::endl;
    return 0;
  }
  train_options options;
  options.device = *dev;
  options.on_epoch = [](const epoch_report& r) {
    std::printf("epoch %d  train_loss %.4f  train_acc %.4f  val_loss %.4f  val_acc %.4f  %.0f samples/s  %.2f s\n",
                r.epoch, r.train_loss, r.train_acc, r.val_loss, r.val_acc, r.samples_per_s, r.seconds);
    std::fflush(stdout);
    return true;
  };
  auto result = train(hp, *data, options);
  if (!result) {
    std::cerr << "tune_train: " << result.error().message() << "\n";
    return 1;
  }
  nlohmann::json j{{"model", hp.model},
                   {"device", result->device},
                   {"devices", result->devices},
                   {"epochs", result->epochs},
                   {"batch_size", hp.batch_size},
                   {"tf32", hp.tf32},
                   {"test_acc", result->test_acc},
                   {"val_acc", result->val_acc},
                   {"samples_per_s", result->samples_per_s},
                   {"seconds", result->seconds}};
  std::cout << j.dump() << std::endl;
  return 0;
}
