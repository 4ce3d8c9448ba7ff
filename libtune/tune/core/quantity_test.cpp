#include "tune/core/quantity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tune {
namespace {

TEST(Quantity, TenTenthsMakeExactlyOne) {
  auto tenth = quantity::from_double(0.1, "gpu");
  ASSERT_TRUE(tenth);
  quantity sum;
  for (int i = 0; i < 10; ++i) sum += *tenth;
  EXPECT_EQ(sum, quantity::whole(1));
  EXPECT_TRUE(sum.is_whole());
  // The same sum in doubles drifts; ours must not.
  double d = 0;
  for (int i = 0; i < 10; ++i) d += 0.1;
  EXPECT_NE(d, 1.0);
}

TEST(Quantity, ThousandThousandthsMakeOne) {
  auto q = quantity::parse("0.001", "gpu");
  ASSERT_TRUE(q);
  quantity sum;
  for (int i = 0; i < 1000; ++i) sum += *q;
  EXPECT_EQ(sum, quantity::whole(1));
}

TEST(Quantity, ParsesDecimalTextExactly) {
  EXPECT_EQ(quantity::parse("0.25", "gpu")->units(), 2500);
  EXPECT_EQ(quantity::parse("2", "cpu")->units(), 20000);
  EXPECT_EQ(quantity::parse("+1.5", "cpu")->units(), 15000);
  EXPECT_EQ(quantity::parse(".5", "cpu")->units(), 5000);
  EXPECT_EQ(quantity::parse("3.", "cpu")->units(), 30000);
  EXPECT_EQ(quantity::parse("0.00010", "cpu")->units(), 1);  // trailing zeros are fine
}

TEST(Quantity, PrintsShortestExactDecimal) {
  EXPECT_EQ(quantity::from_units(2500).to_string(), "0.25");
  EXPECT_EQ(quantity::whole(8).to_string(), "8");
  EXPECT_EQ(quantity::from_units(1).to_string(), "0.0001");
  EXPECT_EQ(quantity::from_units(12345).to_string(), "1.2345");
  EXPECT_EQ(quantity::from_units(-5000).to_string(), "-0.5");
}

TEST(Quantity, RejectsBadDoublesWithTheirName) {
  struct bad { double v; const char* says; };
  for (auto [v, says] : {bad{std::nan(""), "not a number"},
                         bad{std::numeric_limits<double>::infinity(), "infinite"},
                         bad{-0.5, "negative"},
                         bad{2e9, "too large"},
                         bad{0.00001, "resolution"}}) {
    auto q = quantity::from_double(v, "gpu");
    ASSERT_FALSE(q) << v;
    EXPECT_EQ(q.error().code(), errc::invalid_argument);
    EXPECT_NE(q.error().message().find("gpu"), std::string::npos) << q.error().message();
    EXPECT_NE(q.error().message().find(says), std::string::npos) << q.error().message();
  }
}

TEST(Quantity, RejectsBadTexts) {
  for (const char* t : {"", "-1", "abc", "1.2.3", "0.5x", ".", "1e3", "0.00001", "99999999999"}) {
    auto q = quantity::parse(t, "cpu");
    EXPECT_FALSE(q) << t;
    if (!q) {
      EXPECT_NE(q.error().message().find("cpu"), std::string::npos);
    }
  }
}

TEST(Quantity, ZeroIsAllowed) {
  EXPECT_TRUE(quantity::from_double(0.0, "gpu")->is_zero());
  EXPECT_TRUE(quantity::parse("0", "gpu")->is_zero());
}

TEST(Bytes, ParsesUnits) {
  EXPECT_EQ(*parse_bytes("1024", "memory"), 1024);
  EXPECT_EQ(*parse_bytes("512MiB", "memory"), 512LL << 20);
  EXPECT_EQ(*parse_bytes("16GiB", "memory"), 16LL << 30);
  EXPECT_EQ(*parse_bytes("2 GB", "memory"), 2'000'000'000);
  EXPECT_EQ(*parse_bytes("1.5GiB", "memory"), 3LL << 29);
  EXPECT_EQ(*parse_bytes("0B", "memory"), 0);
}

TEST(Bytes, RejectsBadSizes) {
  for (const char* t : {"", "-5", "12XB", "GiB", "1.00001KiB", "0.5B", "1000000TiB"}) {
    auto b = parse_bytes(t, "memory");
    EXPECT_FALSE(b) << t;
  }
  EXPECT_FALSE(bytes_from_double(1.5, "memory"));
  EXPECT_FALSE(bytes_from_double(-1, "memory"));
  EXPECT_FALSE(bytes_from_double(std::nan(""), "memory"));
  EXPECT_EQ(*bytes_from_double(4096, "memory"), 4096);
}

TEST(Bytes, Formats) {
  EXPECT_EQ(format_bytes(80LL << 30), "80 GiB");
  EXPECT_EQ(format_bytes(1536LL << 20), "1.5 GiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

}  // namespace
}  // namespace tune
