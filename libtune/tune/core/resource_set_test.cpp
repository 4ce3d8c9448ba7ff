#include "tune/core/resource_set.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tune {
namespace {

TEST(ResourceSet, FromJsonReadsEveryKind) {
  auto r = resource_set::from_json(
      R"({"cpu": 4, "gpu": 0.5, "memory": "16GiB", "gpu_memory": 1073741824, "tpu": 2, "disk_ssd": "1.5"})");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->cpu(), quantity::whole(4));
  EXPECT_EQ(r->gpu(), quantity::from_units(5000));
  EXPECT_EQ(r->memory(), 16LL << 30);
  EXPECT_EQ(r->gpu_memory(), 1LL << 30);
  EXPECT_EQ(r->custom("tpu"), quantity::whole(2));
  EXPECT_EQ(r->custom("disk_ssd"), quantity::from_units(15000));
  EXPECT_EQ(r->custom("nothing"), quantity{});
}

TEST(ResourceSet, JsonRoundTrips) {
  auto r = resource_set::from_json(R"({"cpu": 0.5, "gpu": 2, "memory": "1GiB", "b": 1, "a": 3})");
  ASSERT_TRUE(r);
  auto back = resource_set::from_json(r->to_json());
  ASSERT_TRUE(back) << r->to_json();
  EXPECT_EQ(*back, *r);
  EXPECT_EQ(r->to_string(), "{cpu: 0.5, gpu: 2, memory: 1 GiB, a: 3, b: 1}");
}

TEST(ResourceSet, RejectsBadJsonWithAHint) {
  struct bad { const char* json; const char* says; };
  for (auto [json, says] : {bad{"{cpu: 4}", "not valid JSON"},
                            bad{"[1,2]", "must be a JSON object"},
                            bad{R"({"gpu": -1})", "negative"},
                            bad{R"({"gpu": "lots"})", "not a number"},
                            bad{R"({"gpu": true})", "not a number"},
                            bad{R"({"gpu": null})", "not a number"},
                            bad{R"({"gpu": [1]})", "not a number"},
                            bad{R"({"GPU": 1})", "did you mean 'gpu'"},
                            bad{R"({"num_gpus": 1})", "did you mean 'gpu'"},
                            bad{R"({"cpus": 1})", "did you mean 'cpu'"},
                            bad{R"({"": 1})", "empty"},
                            bad{R"({"9lives": 1})", "must start with a letter"},
                            bad{R"({"a b": 1})", "may hold only"},
                            bad{R"({"memory": "12XB"})", "unknown unit"},
                            bad{R"({"memory": 1.5})", "whole number of bytes"}}) {
    auto r = resource_set::from_json(json);
    ASSERT_FALSE(r) << json;
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(says), std::string::npos)
        << json << " -> " << r.error().message();
  }
}

TEST(ResourceSet, MakeChecksLikeJson) {
  EXPECT_TRUE(resource_set::make({{"cpu", 2}, {"gpu", 0.25}}));
  EXPECT_FALSE(resource_set::make({{"gpu", std::nan("")}}));
  EXPECT_FALSE(resource_set::make({{"gpu", -0.1}}));
  EXPECT_FALSE(resource_set::make({{"Gpu", 1}}));
}

TEST(ResourceSet, ArithmeticAndFit) {
  auto a = *resource_set::make({{"cpu", 2}, {"gpu", 0.5}, {"tpu", 1}});
  auto b = *resource_set::make({{"cpu", 1}, {"fpga", 2}});
  auto sum = a;
  sum += b;
  EXPECT_EQ(sum.cpu(), quantity::whole(3));
  EXPECT_EQ(sum.custom("tpu"), quantity::whole(1));
  EXPECT_EQ(sum.custom("fpga"), quantity::whole(2));
  EXPECT_TRUE(a.fits_in(sum));
  EXPECT_TRUE(b.fits_in(sum));
  EXPECT_FALSE(sum.fits_in(a));
  sum -= b;
  EXPECT_EQ(sum, a);  // zero customs vanish: exact equality holds
  EXPECT_TRUE(b.host_fits_in(*resource_set::make({{"cpu", 1}, {"fpga", 2}, {"gpu", 0}})));
  EXPECT_FALSE(b.host_fits_in(*resource_set::make({{"cpu", 1}, {"fpga", 1.9999}})));
}

TEST(CheckRequest, GpuMustBeWholeOrAShare) {
  auto half = *resource_set::make({{"gpu", 0.5}});
  auto two = *resource_set::make({{"gpu", 2}});
  auto one_and_half = *resource_set::make({{"gpu", 1.5}});
  EXPECT_TRUE(check_request(half));
  EXPECT_TRUE(check_request(two));
  auto st = check_request(one_and_half);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("1.5 GPUs"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("whole number"), std::string::npos) << st.message();
}

TEST(CheckRequest, GpuMemoryNeedsAGpu) {
  auto r = *resource_set::make({{"cpu", 1}, {"gpu_memory", 1 << 30}});
  auto st = check_request(r);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("asks for no GPU"), std::string::npos) << st.message();
}

TEST(CheckRequest, EmptyRequestIsRefused) {
  auto st = check_request(resource_set{});
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("asks for nothing"), std::string::npos);
}

}  // namespace
}  // namespace tune
