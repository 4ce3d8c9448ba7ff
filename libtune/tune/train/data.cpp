#include "tune/train/data.hpp"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "tune/train/rng.hpp"

namespace tune::train {

namespace {

constexpr uint32_t image_magic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t label_magic = 0x00000801;  // unsigned bytes, 1 dimension

status missing(const std::string& path) {
  return {errc::not_found, path + " is missing: install dataset-fashion-mnist (apt) or set "
                                  "TUNE_FASHION_MNIST_DIR to a folder with the four IDX files"};
}

// The whole file, decompressed when it is gzip (gzread passes plain files through).
expected<std::vector<uint8_t>> read_all(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return missing(path);
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return status{errc::invalid_argument, "cannot open " + path + " for reading"};
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      return status{errc::invalid_argument, path + " is damaged (" + why + "): download it again"};
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  gzclose(f);
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

expected<idx_images> read_idx_images(const std::string& path) {
  auto bytes = read_all(path);
  if (!bytes) return bytes.error();
  const auto& b = *bytes;
  if (b.size() < 16 || be32(b.data()) != image_magic)
    return status{errc::invalid_argument, path + " is not an IDX image file (magic number 0x00000803 expected)"};
  idx_images out;
  out.count = be32(b.data() + 4);
  out.rows = static_cast<int>(be32(b.data() + 8));
  out.cols = static_cast<int>(be32(b.data() + 12));
  if (out.rows <= 0 || out.cols <= 0 || out.rows > 4096 || out.cols > 4096)
    return status{errc::invalid_argument, path + " claims images of " + std::to_string(out.rows) + "x" +
                                              std::to_string(out.cols) + " pixels: the file is damaged"};
  size_t want = 16 + static_cast<size_t>(out.count) * out.rows * out.cols;
  if (b.size() != want)
    return status{errc::invalid_argument, path + " is truncated or has trailing bytes: " +
                                              std::to_string(b.size()) + " bytes for " + std::to_string(out.count) +
                                              " images, " + std::to_string(want) + " expected; download it again"};
  out.pixels.assign(b.begin() + 16, b.end());
  return out;
}

expected<std::vector<uint8_t>> read_idx_labels(const std::string& path) {
  auto bytes = read_all(path);
  if (!bytes) return bytes.error();
  const auto& b = *bytes;
  if (b.size() < 8 || be32(b.data()) != label_magic)
    return status{errc::invalid_argument, path + " is not an IDX label file (magic number 0x00000801 expected)"};
  size_t want = 8 + static_cast<size_t>(be32(b.data() + 4));
  if (b.size() != want)
    return status{errc::invalid_argument, path + " is truncated or has trailing bytes: " +
                                              std::to_string(b.size()) + " bytes, " + std::to_string(want) +
                                              " expected; download it again"};
  return std::vector<uint8_t>(b.begin() + 8, b.end());
}

expected<image_set> load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  auto images = read_idx_images(images_path);
  if (!images) return images.error();
  auto labels = read_idx_labels(labels_path);
  if (!labels) return labels.error();
  if (static_cast<int64_t>(labels->size()) != images->count)
    return status{errc::invalid_argument, images_path + " has " + std::to_string(images->count) + " images but " +
                                              labels_path + " has " + std::to_string(labels->size()) +
                                              " labels: the two files do not belong together"};
  for (size_t i = 0; i < labels->size(); ++i)
    if ((*labels)[i] >= num_classes)
      return status{errc::invalid_argument, labels_path + " has label " + std::to_string((*labels)[i]) +
                                                " at index " + std::to_string(i) + "; Fashion-MNIST labels are 0..9"};
  image_set s;
  s.count = images->count;
  s.rows = images->rows;
  s.cols = images->cols;
  s.pixels = std::move(images->pixels);
  s.labels = std::move(*labels);
  return s;
}

std::string fashion_mnist_dir(std::string_view dir) {
  if (!dir.empty()) return std::string{dir};
  if (const char* env = std::getenv("TUNE_FASHION_MNIST_DIR"); env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

std::vector<int32_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  rng r{seed};
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[r.below(static_cast<uint64_t>(i) + 1)]);
  return p;
}

expected<std::pair<image_set, image_set>> split_train_validation(const image_set& all, int64_t validation,
                                                                 uint64_t seed) {
  if (validation < 0 || validation >= all.count)
    return status{errc::invalid_argument, "validation size " + std::to_string(validation) + " must be in [0, " +
                                              std::to_string(all.count) + ")"};
  auto p = permutation(all.count, seed ^ 0x5eed5eedULL);
  std::vector<char> held(static_cast<size_t>(all.count), 0);
  for (int64_t i = 0; i < validation; ++i) held[p[i]] = 1;
  image_set train, val;
  for (image_set* s : {&train, &val}) {
    s->rows = all.rows;
    s->cols = all.cols;
  }
  train.count = all.count - validation;
  val.count = validation;
  const size_t f = static_cast<size_t>(all.features());
  train.pixels.reserve(train.count * f);
  val.pixels.reserve(val.count * f);
  for (int64_t i = 0; i < all.count; ++i) {
    image_set& s = held[i] ? val : train;
    s.pixels.insert(s.pixels.end(), all.pixels.begin() + i * f, all.pixels.begin() + (i + 1) * f);
    s.labels.push_back(all.labels[i]);
  }
  return std::pair{std::move(train), std::move(val)};
}

expected<fashion_mnist> load_fashion_mnist(std::string_view dir_arg, int64_t validation, uint64_t split_seed) {
  std::string dir = fashion_mnist_dir(dir_arg);
  auto file = [&](const char* name) {
    std::string p = dir + "/" + name;
    std::error_code ec;
    return std::filesystem::exists(p + ".gz", ec) ? p + ".gz" : p;
  };
  auto train = load_idx_pair(file("train-images-idx3-ubyte"), file("train-labels-idx1-ubyte"));
  if (!train) return train.error();
  auto test = load_idx_pair(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"));
  if (!test) return test.error();
  if (test->rows != train->rows || test->cols != train->cols)
    return status{errc::invalid_argument, "the test images in " + dir + " are not the size of the training images"};
  auto split = split_train_validation(*train, validation, split_seed);
  if (!split) return split.error();
  fashion_mnist out;
  out.train = std::move(split->first);
  out.validation = std::move(split->second);
  out.test = std::move(*test);
  return out;
}

}  // namespace tune::train
