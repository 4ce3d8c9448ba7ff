#include "tune/train/data.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace tune::train {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> be(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

std::vector<uint8_t> idx_images_bytes(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b;
  for (uint32_t v : {magic, count, rows, cols}) {
    auto x = be(v);
    b.insert(b.end(), x.begin(), x.end());
  }
  for (uint32_t i = 0; i < count * rows * cols; ++i) b.push_back(uint8_t(i * 7));
  return b;
}

std::vector<uint8_t> idx_labels_bytes(uint32_t count) {
  std::vector<uint8_t> b = be(0x801);
  auto c = be(count);
  b.insert(b.end(), c.begin(), c.end());
  for (uint32_t i = 0; i < count; ++i) b.push_back(uint8_t(i % 10));
  return b;
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tune_train_data_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ::setenv("TUNE_DATA_CACHE", "off", 1);  // no copies in /dev/shm from these made-up files
  }
  void TearDown() override {
    fs::remove_all(dir_);
    ::unsetenv("TUNE_DATA_CACHE");
  }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz = false) {
    std::string p = (dir_ / name).string();
    if (gz) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    return p;
  }

  fs::path dir_;
};

TEST_F(DataTest, ReadsRawAndGzipImages) {
  for (bool gz : {false, true}) {
    auto p = write(gz ? "a.gz" : "a", idx_images_bytes(0x803, 3, 4, 5), gz);
    auto r = read_idx_images(p);
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(r->count, 3);
    EXPECT_EQ(r->rows, 4);
    EXPECT_EQ(r->cols, 5);
    ASSERT_EQ(r->pixels.size(), 60u);
    EXPECT_EQ(r->pixels[1], 7);
  }
}

// The shared-memory copy of a .gz file: written by the first reader, read by the next;
// not used when it is not whole, from a folder others may write in, or when turned off.
TEST_F(DataTest, GzipFilesAreDecompressedOnceIntoTheUsersCache) {
  ::unsetenv("TUNE_DATA_CACHE");
  auto cache = dir_ / "cache";
  fs::create_directories(cache);
  fs::permissions(cache, fs::perms::owner_all, fs::perm_options::replace);
  ::setenv("TUNE_DATA_CACHE_DIR", cache.c_str(), 1);
  auto bytes = idx_images_bytes(0x803, 3, 4, 5);
  auto p = write("b.gz", bytes, true);
  auto first = read_idx_images(p);
  ASSERT_TRUE(first) << first.error().message();
  std::vector<fs::path> copies;
  for (auto& e : fs::directory_iterator(cache)) copies.push_back(e.path());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(fs::file_size(copies[0]), bytes.size());
  // The copy is what the next reader gets (changed here in place, same size: seen).
  auto changed = bytes;
  changed[16] = 99;
  std::ofstream(copies[0], std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(changed.data()), changed.size());
  auto second = read_idx_images(p);
  ASSERT_TRUE(second) << second.error().message();
  EXPECT_EQ(second->pixels[0], 99);
  // A copy of the wrong size is not used (and is written again whole).
  std::ofstream(copies[0], std::ios::binary | std::ios::trunc).write("x", 1);
  auto third = read_idx_images(p);
  ASSERT_TRUE(third) << third.error().message();
  EXPECT_EQ(third->pixels, first->pixels);
  EXPECT_EQ(fs::file_size(copies[0]), bytes.size());
  // A folder others may write in is not used; nor any with TUNE_DATA_CACHE=off.
  auto open = dir_ / "open";
  fs::create_directories(open);
  fs::permissions(open, fs::perms::all, fs::perm_options::replace);
  ::setenv("TUNE_DATA_CACHE_DIR", open.c_str(), 1);
  ASSERT_TRUE(read_idx_images(p));
  EXPECT_TRUE(fs::is_empty(open));
  ::setenv("TUNE_DATA_CACHE_DIR", cache.c_str(), 1);
  fs::remove(copies[0]);
  ::setenv("TUNE_DATA_CACHE", "off", 1);
  ASSERT_TRUE(read_idx_images(p));
  EXPECT_TRUE(fs::is_empty(cache));
  ::unsetenv("TUNE_DATA_CACHE");
  ::unsetenv("TUNE_DATA_CACHE_DIR");
}

TEST_F(DataTest, WrongMagicIsNamed) {
  auto p = write("labels-as-images", idx_labels_bytes(10));
  auto r = read_idx_images(p);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("is not an IDX image file"), std::string::npos) << r.error().message();
  auto l = read_idx_labels(write("images-as-labels", idx_images_bytes(0x803, 1, 2, 2)));
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message().find("is not an IDX label file"), std::string::npos);
}

TEST_F(DataTest, TruncatedFileIsNamed) {
  auto b = idx_images_bytes(0x803, 3, 4, 5);
  b.resize(b.size() - 1);
  auto r = read_idx_images(write("short.gz", b, true));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("truncated"), std::string::npos) << r.error().message();
  auto l = idx_labels_bytes(10);
  l.pop_back();
  EXPECT_FALSE(read_idx_labels(write("short-labels", l)));
}

TEST_F(DataTest, MissingFileSaysWhatToInstall) {
  auto r = read_idx_images((dir_ / "nothing-here").string());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::not_found);
  EXPECT_NE(r.error().message().find("dataset-fashion-mnist"), std::string::npos);
  EXPECT_NE(r.error().message().find("TUNE_FASHION_MNIST_DIR"), std::string::npos);
  auto all = load_fashion_mnist(dir_.string());
  ASSERT_FALSE(all);
  EXPECT_NE(all.error().message().find("train-images-idx3-ubyte"), std::string::npos) << all.error().message();
}

TEST_F(DataTest, PairsMustMatch) {
  auto imgs = write("i", idx_images_bytes(0x803, 3, 2, 2));
  auto labels = write("l", idx_labels_bytes(4));
  auto r = load_idx_pair(imgs, labels);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("do not belong together"), std::string::npos);
  auto ok = load_idx_pair(imgs, write("l3", idx_labels_bytes(3)));
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->labels[2], 2);
}

TEST(Data, DirectoryFromArgumentThenEnvironmentThenDebian) {
  EXPECT_EQ(fashion_mnist_dir("/x"), "/x");
  ::setenv("TUNE_FASHION_MNIST_DIR", "/from-env", 1);
  EXPECT_EQ(fashion_mnist_dir(), "/from-env");
  ::unsetenv("TUNE_FASHION_MNIST_DIR");
  EXPECT_EQ(fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
}

TEST(Data, PermutationIsDeterministic) {
  auto a = permutation(1000, 42), b = permutation(1000, 42), c = permutation(1000, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<int32_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
}

TEST(Data, SplitIsDeterministicAndDisjoint) {
  image_set all;
  all.count = 600;
  all.rows = 1;
  all.cols = 2;
  for (int i = 0; i < 600; ++i) {  // each image's two pixels encode its index
    all.pixels.push_back(uint8_t(i / 256));
    all.pixels.push_back(uint8_t(i % 256));
    all.labels.push_back(uint8_t(i % 10));
  }
  auto a = split_train_validation(all, 100, 7);
  auto b = split_train_validation(all, 100, 7);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->first.pixels, b->first.pixels);
  EXPECT_EQ(a->second.pixels, b->second.pixels);
  EXPECT_EQ(a->first.count, 500);
  EXPECT_EQ(a->second.count, 100);
  std::set<int> seen;
  for (const image_set* s : {&a->first, &a->second})
    for (int64_t i = 0; i < s->count; ++i) {
      int id = s->pixels[2 * i] * 256 + s->pixels[2 * i + 1];
      EXPECT_EQ(s->labels[i], id % 10);
      EXPECT_TRUE(seen.insert(id).second) << "image " << id << " is in both splits";
    }
  EXPECT_EQ(seen.size(), 600u);
  auto other = split_train_validation(all, 100, 8);
  EXPECT_NE(other->second.pixels, a->second.pixels);
  EXPECT_FALSE(split_train_validation(all, 600, 7));
}

TEST(Data, FashionMnistWhenInstalled) {
  auto d = load_fashion_mnist();
  if (!d) GTEST_SKIP() << d.error().message();
  EXPECT_EQ(d->train.count, 55000);
  EXPECT_EQ(d->validation.count, 5000);
  EXPECT_EQ(d->test.count, 10000);
  EXPECT_EQ(d->train.rows, 28);
  EXPECT_EQ(d->test.cols, 28);
  EXPECT_EQ(d->train.pixels.size(), 55000u * 784);
}

}  // namespace
}  // namespace tune::train
