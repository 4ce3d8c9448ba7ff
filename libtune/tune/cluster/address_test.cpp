#include "tune/cluster/address.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

TEST(HostPort, ReadsHostsNamesAndBracketedIpv6) {
  auto a = parse_host_port("10.0.0.1:6380", "--address");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->to_string(), "10.0.0.1:6380");
  auto n = parse_host_port("head.example:1", "--address");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->host, "head.example");
  auto v6 = parse_host_port("[::1]:65535", "--address");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 65535);
  EXPECT_EQ(v6->to_string(), "[::1]:65535");
}

TEST(HostPort, EveryBadAddressSaysWhatIsWrongAndHowToWriteIt) {
  for (auto [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"10.0.0.1", "no port"},
           {":6380", "no host"},
           {"h:", "the port is not a number"},
           {"h:63x0", "the port is not a number"},
           {"h:0", "between 1 and 65535"},
           {"h:70000", "between 1 and 65535"},
           {"::1:6380", "put an IPv6 address in brackets"},
           {"[::1]6380", "[ADDR]:PORT"},
           {"[::1", "[ADDR]:PORT"}}) {
    auto r = parse_host_port(text, "--address");
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.error().message().find(why), std::string::npos) << text << ": " << r.error().message();
    EXPECT_NE(r.error().message().find("--address '" + text + "'"), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find("write HOST:PORT"), std::string::npos);
  }
}

TEST(HostPort, TheLocalAddressTowardsLoopbackIsLoopback) {
  EXPECT_EQ(local_address_towards("127.0.0.1", 6380), "127.0.0.1");
  EXPECT_EQ(local_address_towards("no-such-host.invalid", 6380), "");
}

}  // namespace
}  // namespace tune
