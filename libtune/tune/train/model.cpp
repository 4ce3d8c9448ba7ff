#include "tune/train/model.hpp"

#include <cmath>

#include "tune/train/rng.hpp"

namespace tune::train {

status hyperparameters::check() const {
  auto bad = [](std::string m) { return status{errc::invalid_argument, std::move(m)}; };
  if (model != "mlp" && model != "cnn") return bad("model \"" + model + "\" is unknown: use \"mlp\" or \"cnn\"");
  if (!(lr > 0) || !std::isfinite(lr)) return bad("lr " + std::to_string(lr) + " must be a positive number (try 0.05)");
  if (!(momentum >= 0 && momentum < 1)) return bad("momentum " + std::to_string(momentum) + " must be in [0, 1)");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    return bad("weight_decay " + std::to_string(weight_decay) + " must be >= 0 (try 5e-4)");
  if (batch_size <= 0 || batch_size > 65535)
    return bad("batch_size " + std::to_string(batch_size) + " must be in [1, 65535]");
  if (width < 0 || width > 65536) return bad("width " + std::to_string(width) + " must be in [1, 65536], or 0 for the default");
  if (model == "mlp" && (depth <= 0 || depth > 64))
    return bad("depth " + std::to_string(depth) + " must be in [1, 64] hidden layers");
  if (schedule != "cosine" && schedule != "constant")
    return bad("schedule \"" + schedule + "\" is unknown: use \"cosine\" or \"constant\"");
  if (epochs <= 0) return bad("epochs " + std::to_string(epochs) + " must be at least 1");
  return status::ok();
}

double hyperparameters::lr_at(int epoch) const {
  if (schedule == "constant") return lr;
  return lr * 0.5 * (1.0 + std::cos(3.141592653589793 * epoch / epochs));
}

network describe(const hyperparameters& hp, int rows, int cols, int classes) {
  network net;
  net.input_features = int64_t{rows} * cols;
  net.classes = classes;
  const int w = hp.effective_width();
  auto add = [&](layer l) {
    l.weight_offset = net.parameter_count;
    l.bias_offset = l.weight_offset + l.weight_count();
    net.parameter_count = l.bias_offset + size_t(l.out);
    net.layers.push_back(l);
  };
  int64_t features = net.input_features;
  if (hp.model == "cnn") {
    add({layer_kind::conv_block, 1, 32, rows, cols, true});
    add({layer_kind::conv_block, 32, 64, rows / 2, cols / 2, true});
    features = int64_t{64} * (rows / 4) * (cols / 4);
    add({layer_kind::dense, static_cast<int>(features), w, 0, 0, true});
    features = w;
  } else {
    for (int i = 0; i < hp.depth; ++i) {
      add({layer_kind::dense, static_cast<int>(features), w, 0, 0, true});
      features = w;
    }
  }
  add({layer_kind::dense, static_cast<int>(features), classes, 0, 0, false});
  return net;
}

std::vector<float> init_parameters(const network& net, uint64_t seed) {
  std::vector<float> p(net.parameter_count, 0.0f);
  rng r{seed * 0x9e3779b97f4a7c15ULL + 17};
  for (const auto& l : net.layers) {
    double fan_in = l.kind == layer_kind::dense ? l.in : l.in * 9.0;
    double std_dev = std::sqrt((l.relu ? 2.0 : 1.0) / fan_in);
    for (size_t i = 0; i < l.weight_count(); ++i) p[l.weight_offset + i] = static_cast<float>(r.normal() * std_dev);
  }
  return p;
}

}  // namespace tune::train
