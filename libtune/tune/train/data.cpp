#include "tune/train/data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <numeric>
#include <optional>

#include "tune/train/rng.hpp"

namespace tune::train {

namespace {

constexpr uint32_t image_magic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t label_magic = 0x00000801;  // unsigned bytes, 1 dimension

status missing(const std::string& path) {
  return {errc::not_found, path + " is missing: install dataset-fashion-mnist (apt) or set "
                                  "TUNE_FASHION_MNIST_DIR to a folder with the four IDX files"};
}

expected<std::vector<uint8_t>> decompress(const std::string& path);

}  // namespace

// Decompressed copies of .gz files in shared memory, so that the trials of a machine
// decompress a dataset once (a tuning run starts many trials, each a new process, and
// decompressing Fashion-MNIST took ~0.3 s of each one's start). The folder
// (machine_cache_dir) is used only if it is a real folder of this user's with no
// access for others (nobody else can plant a file). A copy is named by the file's path, size and
// modification time, written under a temporary name and renamed (a reader never sees
// half of one), and used only when its size is what the gzip file says it holds.
std::string machine_cache_dir() {
  if (const char* off = std::getenv("TUNE_DATA_CACHE"); off && std::string_view{off} == "off") return "";
  const char* env = std::getenv("TUNE_DATA_CACHE_DIR");
  std::string dir = env && *env ? env : "/dev/shm/libtune-" + std::to_string(::geteuid());
  ::mkdir(dir.c_str(), 0700);
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return "";
  return dir;
}

namespace {

// What the gzip file says it holds (its trailer: the size modulo 2^32); -1: not gzip.
int64_t gzip_size(int fd, int64_t file_size) {
  uint8_t head[2], tail[4];
  if (file_size < 18 || ::pread(fd, head, 2, 0) != 2 || head[0] != 0x1f || head[1] != 0x8b ||
      ::pread(fd, tail, 4, file_size - 4) != 4)
    return -1;
  return int64_t{tail[0]} | int64_t{tail[1]} << 8 | int64_t{tail[2]} << 16 | int64_t{tail[3]} << 24;
}

// The cache's name for `path` (empty: no cache, or not a gzip file), and the size its
// copy must have.
std::pair<std::string, int64_t> cache_entry(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st{};
  int64_t holds = ::fstat(fd, &st) == 0 ? gzip_size(fd, st.st_size) : -1;
  ::close(fd);
  if (holds < 0) return {};
  auto dir = machine_cache_dir();
  if (dir.empty()) return {};
  std::error_code ec;
  auto full = std::filesystem::weakly_canonical(path, ec).string();
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of what names this version of the file
  auto mix = [&](std::string_view text) {
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  };
  mix(full);
  mix(std::to_string(st.st_size) + "/" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec));
  char name[32];
  std::snprintf(name, sizeof name, "-%016llx.raw", static_cast<unsigned long long>(h));
  return {dir + "/" + std::filesystem::path(path).filename().string() + name, holds};
}

// The cached copy when it is whole; nothing otherwise.
std::optional<std::vector<uint8_t>> read_cached(const std::string& copy, int64_t holds) {
  int fd = ::open(copy.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  std::optional<std::vector<uint8_t>> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      (st.st_size & 0xffffffffLL) == holds) {
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      auto n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == bytes.size()) out = std::move(bytes);
  }
  ::close(fd);
  return out;
}

// Best effort: a copy that cannot be written is no error (the next trial decompresses).
void write_cached(const std::string& copy, const std::vector<uint8_t>& bytes) {
  auto tmp = copy + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  size_t put = 0;
  while (put < bytes.size()) {
    auto n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n <= 0) break;
    put += static_cast<size_t>(n);
  }
  bool ok = ::close(fd) == 0 && put == bytes.size();
  if (!ok || ::rename(tmp.c_str(), copy.c_str()) != 0) ::unlink(tmp.c_str());
}

// The whole file, decompressed when it is gzip (gzread passes plain files through).
expected<std::vector<uint8_t>> read_all(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return missing(path);
  auto [copy, holds] = cache_entry(path);
  if (!copy.empty())
    if (auto cached = read_cached(copy, holds)) return std::move(*cached);
  auto out = decompress(path);
  if (out && !copy.empty() && (static_cast<int64_t>(out->size()) & 0xffffffffLL) == holds) write_cached(copy, *out);
  return out;
}

expected<std::vector<uint8_t>> decompress(const std::string& path) {
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
