// The two models and their hyperparameters. A network is a list of layers over one
// flat parameter vector (each layer's weights, then its bias), so the optimiser is a
// single fused update over everything and the CPU and GPU share one layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune::train {

struct hyperparameters {
  std::string model = "mlp";  // "mlp" or "cnn"
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int batch_size = 128;
  int width = 0;  // MLP hidden width, CNN fully connected width; 0: 512 (MLP), 128 (CNN)
  int depth = 2;  // MLP hidden layers (the CNN's shape is fixed)
  int epochs = 5;
  uint64_t seed = 1;
  std::string schedule = "cosine";  // "cosine": lr * (1 + cos(pi * e / epochs)) / 2 in
                                    // epoch e = 0, 1, ...; "constant": lr throughout
  bool tf32 = false;  // GPU only: TF32 tensor cores for matrix products and convolutions

  int effective_width() const { return width > 0 ? width : (model == "cnn" ? 128 : 512); }
  // Every value in range, with a message that names the value and the range.
  status check() const;
  // The learning rate of epoch e (0-based).
  double lr_at(int epoch) const;
};

enum class layer_kind {
  dense,       // y = x W^T + b, W is [out, in]; ReLU unless it is the last layer
  conv_block,  // 3x3 convolution (padding 1, cross-correlation like PyTorch), + bias,
               // ReLU, 2x2 max pool with stride 2; W is [out_c, in_c, 3, 3]
};

struct layer {
  layer_kind kind = layer_kind::dense;
  int in = 0, out = 0;       // dense: features; conv: channels
  int height = 0, width = 0;  // conv: input size (even); output is half of each
  bool relu = true;
  size_t weight_offset = 0, bias_offset = 0;  // into the flat parameter vector

  size_t weight_count() const { return kind == layer_kind::dense ? size_t(in) * out : size_t(in) * out * 9; }
  // Values per sample that this layer outputs.
  int64_t out_features() const {
    return kind == layer_kind::dense ? out : int64_t{out} * (height / 2) * (width / 2);
  }
  int64_t in_features() const { return kind == layer_kind::dense ? in : int64_t{in} * height * width; }
};

struct network {
  std::vector<layer> layers;
  size_t parameter_count = 0;
  int64_t input_features = 0;
  int classes = 0;
};

// The network for these hyperparameters on images of rows x cols (28 x 28).
// "mlp": in -> [width, ReLU] x depth -> 10.
// "cnn": conv32-pool-conv64-pool-fc(width)-fc10 (conv blocks as above).
network describe(const hyperparameters& hp, int rows = 28, int cols = 28, int classes = 10);

// He (Kaiming) normal initialisation from the seed: hidden weights N(0, 2/fan_in), the
// last layer N(0, 1/fan_in), biases 0. Generated on the host so CPU and GPU start equal.
std::vector<float> init_parameters(const network& net, uint64_t seed);

}  // namespace tune::train
