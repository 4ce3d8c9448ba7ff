// Fashion-MNIST from IDX files: reading (gzip or raw), checking, and the seeded
// train/validation split. Pixels stay as bytes (a quarter of the memory, and what the
// GPU keeps resident); `normalise` turns one into the float the models see, so the
// CPU and GPU paths and the PyTorch baseline all use the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/status.hpp"

namespace tune::train {

// Fashion-MNIST's pixel mean and standard deviation (of x / 255 over the 60,000
// training images); bench/torch_baseline.py uses the same two numbers.
inline constexpr float pixel_mean = 0.2860f;
inline constexpr float pixel_std = 0.3530f;
inline constexpr int num_classes = 10;

inline float normalise(uint8_t p) { return (static_cast<float>(p) / 255.0f - pixel_mean) / pixel_std; }

// A set of labelled images, row-major: image i is pixels[i*rows*cols ...].
struct image_set {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;

  int64_t features() const { return int64_t{rows} * cols; }
};

struct idx_images {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;
};

// An IDX file, gzip-compressed or not (zlib reads both). Errors name the file and say
// what is wrong with it (missing, not IDX, truncated).
expected<idx_images> read_idx_images(const std::string& path);
expected<std::vector<uint8_t>> read_idx_labels(const std::string& path);

// Images and labels that belong together: counts must match and labels be < 10.
expected<image_set> load_idx_pair(const std::string& images_path, const std::string& labels_path);

// The folder to read from: `dir` when given, else $TUNE_FASHION_MNIST_DIR, else
// Debian's /usr/share/datasets/fashion-mnist (package dataset-fashion-mnist).
std::string fashion_mnist_dir(std::string_view dir = {});

struct fashion_mnist {
  image_set train;       // 55,000 by default: what the models learn from
  image_set validation;  // 5,000 held out of the training file: what tuning compares
  image_set test;        // the 10,000 t10k images: reported, never tuned on
};

// Reads the four files (name.gz, else name) and splits the training file. The split
// depends on split_seed only, not on a trial's seed, so every trial of a tuning run is
// compared on the same validation images.
expected<fashion_mnist> load_fashion_mnist(std::string_view dir = {}, int64_t validation = 5000,
                                           uint64_t split_seed = 0);

// Moves `validation` images of `all`, chosen by a seeded permutation, into the second
// set; the rest stay in the first, in their original order.
expected<std::pair<image_set, image_set>> split_train_validation(const image_set& all, int64_t validation,
                                                                 uint64_t seed);

// The folder where a machine's trials keep what one of them worked out for the others
// (decompressed datasets, cuDNN's algorithm choices): $TUNE_DATA_CACHE_DIR, else
// /dev/shm/libtune-<uid>, made if missing; "" when it is not a real folder of this
// user's with no access for others, or TUNE_DATA_CACHE=off.
std::string machine_cache_dir();

// A deterministic permutation of 0..n-1 (Fisher-Yates on splitmix64), the same on
// every platform and standard library, unlike std::shuffle.
std::vector<int32_t> permutation(int64_t n, uint64_t seed);

}  // namespace tune::train
