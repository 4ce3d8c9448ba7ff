#include "tune/train/model.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "tune/train/backend.hpp"

namespace tune::train {
namespace {

void expect_refused(hyperparameters hp, const std::string& words) {
  auto s = hp.check();
  ASSERT_FALSE(s) << "accepted: " << words;
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

TEST(Hyperparameters, DefaultsAreValid) {
  EXPECT_TRUE(hyperparameters{}.check());
  hyperparameters cnn;
  cnn.model = "cnn";
  EXPECT_TRUE(cnn.check());
  EXPECT_EQ(cnn.effective_width(), 128);
  EXPECT_EQ(hyperparameters{}.effective_width(), 512);
}

TEST(Hyperparameters, BadValuesAreNamed) {
  hyperparameters hp;
  hp.model = "resnet";
  expect_refused(hp, "model \"resnet\" is unknown");
  hp = {};
  hp.lr = 0;
  expect_refused(hp, "lr");
  hp.lr = std::nan("");
  expect_refused(hp, "lr");
  hp = {};
  hp.batch_size = 0;
  expect_refused(hp, "batch_size 0");
  hp = {};
  hp.depth = 0;
  expect_refused(hp, "depth 0");
  hp = {};
  hp.momentum = 1.0;
  expect_refused(hp, "momentum");
  hp = {};
  hp.weight_decay = -1;
  expect_refused(hp, "weight_decay");
  hp = {};
  hp.epochs = 0;
  expect_refused(hp, "epochs");
  hp = {};
  hp.width = -3;
  expect_refused(hp, "width");
}

TEST(Model, ShapesAndParameterCounts) {
  auto mlp = describe(hyperparameters{});
  ASSERT_EQ(mlp.layers.size(), 3u);
  EXPECT_EQ(mlp.parameter_count, 784u * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  EXPECT_FALSE(mlp.layers.back().relu);
  hyperparameters c;
  c.model = "cnn";
  auto cnn = describe(c);
  ASSERT_EQ(cnn.layers.size(), 4u);
  EXPECT_EQ(cnn.layers[1].out_features(), 64 * 7 * 7);
  EXPECT_EQ(cnn.layers[2].in, 3136);
  EXPECT_EQ(cnn.parameter_count, 32u * 9 + 32 + 64 * 32 * 9 + 64 + 3136 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(cnn.layers.back().bias_offset + 10, cnn.parameter_count);
}

TEST(Model, InitIsSeededHeNormalWithZeroBias) {
  auto net = describe(hyperparameters{});
  auto a = init_parameters(net, 1), b = init_parameters(net, 1), c = init_parameters(net, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto& l0 = net.layers[0];
  double sq = 0;
  for (size_t i = 0; i < l0.weight_count(); ++i) sq += double(a[l0.weight_offset + i]) * a[l0.weight_offset + i];
  EXPECT_NEAR(std::sqrt(sq / l0.weight_count()), std::sqrt(2.0 / 784), 0.002);
  for (int j = 0; j < l0.out; ++j) EXPECT_EQ(a[l0.bias_offset + j], 0.0f);
}

TEST(Device, Parses) {
  EXPECT_FALSE(parse_device("cpu")->cuda);
  EXPECT_EQ(parse_device("cuda:1")->index, 1);
  EXPECT_TRUE(parse_device("cuda")->cuda);
  auto bad = parse_device("cuda:x");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("cpu, cuda, cuda:N, cuda:N,M,... or cuda:all"), std::string::npos) << bad.error().message();
  EXPECT_FALSE(parse_device("tpu"));
}

}  // namespace
}  // namespace tune::train
