// Outside text as UTF-8: checked, shown with U+FFFD, cut on a character boundary; JSON
// written and read without throwing; names kept byte for byte.
#include "tune/core/utf8.hpp"

#include <gtest/gtest.h>

#include <random>

#include "tune/core/json_text.hpp"

namespace tune {
namespace {

const std::string fffd = "\xEF\xBF\xBD";

struct utf8_case {
  std::string text;
  bool valid;
  std::string shown;
};

TEST(Utf8, WellFormedAndShown) {
  for (auto& c : std::vector<utf8_case>{
           {"", true, ""},
           {"plain ascii", true, "plain ascii"},
           {std::string("nul\0inside", 10), true, std::string("nul\0inside", 10)},
           {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", true, "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
           {"\xff\xfe\xfd", false, fffd + fffd + fffd},
           {"a\x80" "b", false, "a" + fffd + "b"},                      // a continuation byte alone
           {"\xC0\xAF", false, fffd + fffd},                            // overlong '/'
           {"\xE0\x80\xAF", false, fffd + fffd + fffd},                 // overlong, three bytes
           {"\xED\xA0\x80", false, fffd + fffd + fffd},                 // a surrogate (U+D800)
           {"\xF4\x90\x80\x80", false, fffd + fffd + fffd + fffd},      // above U+10FFFF
           {"\xE2\x82", false, fffd},                                   // cut short at the end: one maximal subpart
           {"\xE2\x82x", false, fffd + "x"},
           {"\xF0\x9F\x98", false, fffd},
       }) {
    EXPECT_EQ(valid_utf8(c.text), c.valid) << testing::PrintToString(c.text);
    EXPECT_EQ(shown_utf8(c.text), c.shown) << testing::PrintToString(c.text);
    EXPECT_TRUE(valid_utf8(shown_utf8(c.text)));
  }
}

TEST(Utf8, PrefixNeverCutsACharacter) {
  std::string e = "\xC3\xA9";  // é
  EXPECT_EQ(utf8_prefix("abc", 10), "abc");
  EXPECT_EQ(utf8_prefix("a" + e, 2), "a");
  EXPECT_EQ(utf8_prefix("a" + e, 3), "a" + e);
  EXPECT_EQ(utf8_prefix("\xF0\x9F\x98\x80z", 3), "");
  EXPECT_EQ(utf8_prefix("\xff\xff\xff", 2), "\xff\xff");  // an ill-formed byte is one
}

TEST(JsonText, DumpsAnyBytesAndReadsThemBack) {
  nlohmann::json j{{"stderr", "\xff\xfe\xfd oops"}, {std::string("k\xc0"), std::string("\0\xed\xa0\x80", 4)}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what killed the controller
  auto text = json_text(j);
  EXPECT_TRUE(valid_utf8(text));
  auto back = parse_json(text);
  ASSERT_FALSE(back.is_discarded());
  EXPECT_EQ(back["stderr"], fffd + fffd + fffd + " oops");
  EXPECT_EQ(back["k" + fffd], std::string("\0", 1) + fffd + fffd + fffd);
  EXPECT_EQ(json_text(j, 1).find('\n'), 1u);
}

TEST(JsonText, ParseNeverThrows) {
  for (std::string bad : {"", "{", "{\"a\": \"\xff\"}", "\"\\ud800\"", "nul\0", "[1, 2", "{\"a\":1}x"})
    EXPECT_TRUE(parse_json(bad).is_discarded()) << testing::PrintToString(bad);
  const std::string pool = "{}[]\",:0123456789.eE-+tfnul\\u\xff\xed\xa0\x80 ab";
  std::mt19937 rng(39);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = pool[rng() % pool.size()];
    (void)parse_json(s);  // no exception
  }
}

TEST(JsonText, ExactNamesRoundTripEveryByte) {
  EXPECT_EQ(exact_name("train.py"), "train.py");
  EXPECT_EQ(exact_name("bad\xffname.txt"), (nlohmann::json{{"hex", "626164ff6e616d652e747874"}}));
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string name(1 + rng() % 40, '\0');
    for (auto& c : name) c = static_cast<char>(rng() % 256);
    auto j = exact_name(name);
    auto back = exact_name_from(parse_json(json_text(j)));
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, name);
  }
  for (auto bad : {nlohmann::json(3), nlohmann::json{{"hex", "abc"}}, nlohmann::json{{"hex", "zz"}},
                   nlohmann::json{{"hex", "61"}, {"x", 1}}, nlohmann::json::array()})
    EXPECT_FALSE(exact_name_from(bad)) << bad.dump();
}

}  // namespace
}  // namespace tune
