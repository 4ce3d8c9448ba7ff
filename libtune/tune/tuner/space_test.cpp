#include "tune/tuner/space.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace tune {
namespace {

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The message of the error a one-parameter space reports.
std::string error_of(const domain& d, const std::string& name = "p") {
  search_space s{{name, d}};
  auto st = s.validate();
  EXPECT_FALSE(st.is_ok()) << "expected an error for " << d.describe();
  return st.message();
}

std::vector<config> draw(const search_space& s, int n, std::uint64_t seed = 1) {
  rng r{seed};
  std::vector<config> out;
  for (int i = 0; i < n; ++i) {
    auto c = s.sample(r);
    EXPECT_TRUE(c) << c.error().message();
    if (!c) break;
    out.push_back(*c);
  }
  return out;
}

TEST(Rng, SequenceIsPinned) {
  // xoshiro256** seeded by splitmix64(42), computed independently (Python big ints).
  rng r{42};
  EXPECT_EQ(r.next(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(r.next(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(r.uniform(), 0.6800434110281394);
}

TEST(Rng, BelowIsUniformAndNormalHasUnitVariance) {
  rng r{7};
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[r.below(7)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
  double sum = 0, sq = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
}

TEST(Domains, UniformStaysInRangeAndIsFlat) {
  auto cs = draw({{"x", uniform(-2.0, 6.0)}}, 20000);
  std::vector<int> quarter(4, 0);
  for (const auto& c : cs) {
    double x = c["x"].get<double>();
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 6.0);
    ++quarter[static_cast<int>((x + 2.0) / 2.0)];
  }
  for (int q : quarter) EXPECT_NEAR(q / 20000.0, 0.25, 0.015);
}

TEST(Domains, LoguniformPutsAQuarterInEachOfFourDecades) {
  auto cs = draw({{"lr", loguniform(1e-4, 1.0)}}, 20000);
  std::vector<int> decade(4, 0);
  for (const auto& c : cs) {
    double x = c["lr"].get<double>();
    ASSERT_GE(x, 1e-4);
    ASSERT_LE(x, 1.0);
    ++decade[std::min(3, static_cast<int>(std::floor(std::log10(x) + 4)))];
  }
  // Uniform would put 99.9% in the top decade; log-uniform 25% in each.
  for (int d : decade) EXPECT_NEAR(d / 20000.0, 0.25, 0.015);
}

TEST(Domains, QuniformIsExactlyQuantizedWithHalfWeightEndpoints) {
  auto cs = draw({{"x", quniform(0.0, 1.0, 0.1)}}, 40000);
  std::map<long, int> count;
  for (const auto& c : cs) {
    double x = c["x"].get<double>();
    ASSERT_GE(x, 0.0);
    ASSERT_LE(x, 1.0);
    long k = std::lround(x / 0.1);
    EXPECT_EQ(x, std::min(1.0, k * 0.1)) << x;  // exactly k * q
    ++count[k];
  }
  ASSERT_EQ(count.size(), 11u);
  // round(U(0,1)/0.1): 0 and 10 get half a bin (0.05), the others 0.1.
  EXPECT_NEAR(count[0] / 40000.0, 0.05, 0.006);
  EXPECT_NEAR(count[10] / 40000.0, 0.05, 0.006);
  for (long k = 1; k < 10; ++k) EXPECT_NEAR(count[k] / 40000.0, 0.1, 0.008);
}

TEST(Domains, QuniformKeepsOnlyMultiplesInsideTheRange) {
  auto cs = draw({{"x", quniform(0.05, 1.0, 0.25)}}, 5000);
  std::set<double> seen;
  for (const auto& c : cs) seen.insert(c["x"].get<double>());
  EXPECT_EQ(seen, (std::set<double>{0.25, 0.5, 0.75, 1.0}));
}

TEST(Domains, QloguniformIsQuantizedAndLogDistributed) {
  auto cs = draw({{"x", qloguniform(1.0, 1000.0, 1.0)}}, 20000);
  int below10 = 0;
  for (const auto& c : cs) {
    double x = c["x"].get<double>();
    ASSERT_EQ(x, std::round(x));
    ASSERT_GE(x, 1.0);
    ASSERT_LE(x, 1000.0);
    below10 += x < 9.5;
  }
  EXPECT_NEAR(below10 / 20000.0, std::log(9.5) / std::log(1000.0), 0.015);
}

TEST(Domains, RandintExcludesTheHighBound) {
  auto cs = draw({{"n", randint(0, 10)}, {"m", randint(-3, -1)}}, 20000);
  std::map<int, int> n, m;
  for (const auto& c : cs) {
    ASSERT_TRUE(c["n"].is_number_integer());
    ++n[c["n"].get<int>()];
    ++m[c["m"].get<int>()];
  }
  ASSERT_EQ(n.size(), 10u);
  EXPECT_EQ(n.begin()->first, 0);
  EXPECT_EQ(n.rbegin()->first, 9);  // never 10
  for (auto [v, k] : n) EXPECT_NEAR(k / 20000.0, 0.1, 0.008) << v;
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.count(-3), 1u);
  EXPECT_EQ(m.count(-2), 1u);
}

TEST(Domains, LograndintIsLogDistributedIntegers) {
  auto cs = draw({{"n", lograndint(1, 1000)}}, 20000);
  int below10 = 0;
  for (const auto& c : cs) {
    ASSERT_TRUE(c["n"].is_number_integer());
    int v = c["n"].get<int>();
    ASSERT_GE(v, 1);
    ASSERT_LE(v, 999);
    below10 += v < 10;
  }
  // floor(exp(U(log 1, log 1000))) < 10  <=>  the exponent < log 10: probability 1/3.
  EXPECT_NEAR(below10 / 20000.0, 1.0 / 3.0, 0.015);
}

TEST(Domains, RandnIsNormalAndQrandnIsQuantized) {
  auto cs = draw({{"x", randn(10, 2)}, {"q", qrandn(0, 1, 0.25)}}, 40000);
  double sum = 0, sq = 0;
  int within_1sd = 0;
  for (const auto& c : cs) {
    const double x = c["x"].get<double>();
    sum += x, sq += x * x, within_1sd += std::fabs(x - 10) < 2;
    const double q = c["q"].get<double>();
    EXPECT_EQ(q, std::round(q / 0.25) * 0.25);
  }
  const double mean = sum / cs.size(), var = sq / cs.size() - mean * mean;
  EXPECT_NEAR(mean, 10, 0.05);
  EXPECT_NEAR(std::sqrt(var), 2, 0.05);
  EXPECT_NEAR(within_1sd / 40000.0, 0.6827, 0.01);
  EXPECT_EQ(randn(10, 2).describe(), "randn(10, 2)");
  EXPECT_TRUE(has(error_of(randn(0, 0)), "the standard deviation must be > 0"));
  EXPECT_TRUE(has(error_of(randn(NAN, 1)), "must be finite"));
  EXPECT_TRUE(has(error_of(qrandn(0, 1, 0)), "the step q must be a number > 0"));
  search_space s{{"x", randn(0, 1)}};
  EXPECT_TRUE(s.check({{"x", -1e6}}));  // unbounded
  EXPECT_FALSE(s.check({{"x", "a"}}));
}

TEST(Domains, QrandintIncludesTheHighBound) {
  std::map<int, int> seen;
  for (const auto& c : draw({{"n", qrandint(0, 100, 25)}}, 5000)) {
    ASSERT_TRUE(c["n"].is_number_integer());
    ++seen[c["n"].get<int>()];
  }
  ASSERT_EQ(seen.size(), 5u);  // 0, 25, 50, 75, 100: equally likely
  for (int v : {0, 25, 50, 75, 100}) EXPECT_NEAR(seen[v], 1000, 120) << v;
  std::map<int, int> logs;
  for (const auto& c : draw({{"n", qlograndint(4, 1024, 4)}}, 5000)) {
    const int n = c["n"].get<int>();
    EXPECT_TRUE(n % 4 == 0 && n >= 4 && n <= 1024) << n;
    ++logs[n < 64 ? 0 : 1];  // log-uniform: half the mass below sqrt(4 * 1024) = 64
  }
  EXPECT_NEAR(logs[0], 2500, 200);
  EXPECT_TRUE(has(error_of(qrandint(0, 10, 0)), "an integer >= 1"));
  EXPECT_TRUE(has(error_of(qrandint(1, 3, 5)), "no multiple of q=5 lies in [1, 3]"));
  EXPECT_TRUE(has(error_of(qrandint(10, 0, 2)), "qrandint(0, 10, 2)"));
  EXPECT_TRUE(has(error_of(qlograndint(0, 8, 2)), "a log scale needs a low bound > 0"));
  search_space s{{"n", qrandint(0, 100, 25)}};
  EXPECT_TRUE(s.check({{"n", 100}}));
  EXPECT_FALSE(s.check({{"n", 30}}));
}

TEST(Domains, WeightedChoiceFollowsItsWeights) {
  std::map<std::string, int> seen;
  for (const auto& c : draw({{"opt", choice({"sgd", "adam", "lamb"}, {3, 1, 0})}}, 8000))
    ++seen[c["opt"].get<std::string>()];
  EXPECT_NEAR(seen["sgd"], 6000, 200);
  EXPECT_NEAR(seen["adam"], 2000, 200);
  EXPECT_EQ(seen["lamb"], 0);  // weight 0: never
  EXPECT_EQ(choice({1, 2}, {3, 1}).choices().weights, (std::vector<double>{0.75, 0.25}));
  EXPECT_TRUE(has(error_of(choice({1, 2}, {1})), "2 options and 1 weights"));
  EXPECT_TRUE(has(error_of(choice({1, 2}, {1, -1})), "weight 1 is -1"));
  EXPECT_TRUE(has(error_of(choice({1, 2}, {0, 0})), "every weight is 0"));
  EXPECT_TRUE(has(error_of(choice({1, 2}, {1, INFINITY})), "finite numbers >= 0"));
}

TEST(Complete, KeepsWhatIsGivenAndDrawsTheRest) {
  search_space s{{"lr", loguniform(1e-4, 1e-1)},
                 {"width", choice({64, 128})},
                 {"model", search_space{{"depth", randint(1, 5)}, {"act", "relu"}}},
                 {"opt", choice({search_space{{"name", "sgd"}, {"m", uniform(0, 1)}},
                                 search_space{{"name", "adam"}, {"b1", uniform(0.8, 1)}}})}};
  rng r{3};
  trace tr;
  auto c = s.complete({{"lr", 0.01}, {"model", {{"depth", 3}}}, {"opt", {{"name", "adam"}}}}, r, {}, nullptr, &tr);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ((*c)["lr"], 0.01);
  EXPECT_EQ((*c)["model"]["depth"], 3);
  EXPECT_EQ((*c)["model"]["act"], "relu");
  EXPECT_TRUE((*c)["width"] == 64 || (*c)["width"] == 128);  // drawn
  EXPECT_EQ((*c)["opt"]["name"], "adam");                       // the branch the values fit
  EXPECT_TRUE((*c)["opt"].contains("b1"));
  EXPECT_FALSE((*c)["opt"].contains("m"));
  EXPECT_EQ(tr.at("/lr").value, 0.01);
  EXPECT_EQ(tr.at("/opt").value, 1);  // option 1 of the choice
  EXPECT_TRUE(s.check(*c));
  // Errors name the parameter and what is wrong.
  EXPECT_TRUE(has(s.complete({{"lr", 5.0}}, r).error().message(), "parameter \"lr\": 5.0 lies outside"));
  EXPECT_TRUE(has(s.complete({{"lrr", 0.1}}, r).error().message(), "unknown parameter \"lrr\""));
  EXPECT_TRUE(has(s.complete({{"width", 100}}, r).error().message(), "is none of the options"));
  EXPECT_TRUE(has(s.complete({{"model", {{"dept", 1}}}}, r).error().message(), "unknown parameter \"model.dept\""));
  EXPECT_TRUE(has(s.complete({{"model", 3}}, r).error().message(), "not an object"));
  EXPECT_TRUE(has(s.complete(config::array(), r).error().message(), "must be a JSON object"));
}

TEST(Domains, ChoiceKeepsJsonTypesAndIsUniform) {
  auto cs = draw({{"c", choice({1, "two", nlohmann::json::array({3, 4}), nullptr})}}, 20000);
  std::map<std::string, int> count;
  for (const auto& c : cs) ++count[c["c"].dump()];
  ASSERT_EQ(count.size(), 4u);
  for (const auto& key : {"1", "\"two\"", "[3,4]", "null"})
    EXPECT_NEAR(count[key] / 20000.0, 0.25, 0.015) << key;
}

TEST(Domains, ConstantsAndNestedSpaces) {
  search_space s{{"epochs", 20},
                 {"name", "mlp"},
                 {"flag", true},
                 {"obj", nlohmann::json{{"a", 1}}},
                 {"model", search_space{{"depth", randint(1, 4)},
                                        {"inner", search_space{{"w", uniform(0.0, 1.0)}}}}}};
  for (const auto& c : draw(s, 200)) {
    EXPECT_EQ(c["epochs"], 20);
    EXPECT_EQ(c["name"], "mlp");
    EXPECT_EQ(c["flag"], true);
    EXPECT_EQ(c["obj"], (nlohmann::json{{"a", 1}}));
    ASSERT_TRUE(c["model"].is_object());
    int d = c["model"]["depth"].get<int>();
    EXPECT_TRUE(d >= 1 && d <= 3);
    double w = c["model"]["inner"]["w"].get<double>();
    EXPECT_TRUE(w >= 0 && w < 1);
    EXPECT_EQ(c.size(), 5u);
  }
}

TEST(Domains, ChoiceOfSubspacesIsConditional) {
  search_space s{{"optimizer", choice({search_space{{"name", "sgd"}, {"momentum", uniform(0.5, 0.99)}},
                                       search_space{{"name", "adam"}, {"beta1", 0.9}}})}};
  int sgd = 0;
  rng r{3};
  for (int i = 0; i < 4000; ++i) {
    trace tr;
    auto c = s.sample(r, {}, nullptr, &tr);
    ASSERT_TRUE(c);
    const auto& o = (*c)["optimizer"];
    if (o["name"] == "sgd") {
      ++sgd;
      ASSERT_TRUE(o.contains("momentum"));
      EXPECT_FALSE(o.contains("beta1"));
      double m = o["momentum"].get<double>();
      EXPECT_TRUE(m >= 0.5 && m < 0.99);
      EXPECT_EQ(tr.at("/optimizer").value, 0.0);
      EXPECT_EQ(tr.at("/optimizer#0/momentum").value, m);
    } else {
      EXPECT_EQ(o, (nlohmann::json{{"name", "adam"}, {"beta1", 0.9}}));
      EXPECT_EQ(tr.count("/optimizer#0/momentum"), 0u);
    }
  }
  EXPECT_NEAR(sgd / 4000.0, 0.5, 0.03);
}

TEST(Domains, ConditionalSeesEarlierValues) {
  search_space s{
      {"model", search_space{{"width", choice({64, 512})}}},
      {"batch", conditional([](const config& c) -> domain {
         return c["model"]["width"] == 512 ? choice({8, 16}) : domain(randint(100, 200));
       })},
      {"twice", conditional([](const config& c) -> domain { return c["batch"].get<int>() * 2; })}};
  std::set<int> wide, narrow;
  for (const auto& c : draw(s, 1000)) {
    int b = c["batch"].get<int>();
    (c["model"]["width"] == 512 ? wide : narrow).insert(b);
    EXPECT_EQ(c["twice"].get<int>(), 2 * b);
  }
  EXPECT_EQ(wide, (std::set<int>{8, 16}));
  EXPECT_GT(narrow.size(), 50u);
  EXPECT_GE(*narrow.begin(), 100);
  EXPECT_LE(*narrow.rbegin(), 199);
}

TEST(Domains, ConditionalErrorsNameTheParameter) {
  rng r{1};
  search_space bad_domain{{"x", conditional([](const config&) -> domain { return uniform(2, 1); })}};
  auto c = bad_domain.sample(r);
  ASSERT_FALSE(c);
  EXPECT_TRUE(has(c.error().message(), "parameter \"x\": uniform(2, 1)")) << c.error().message();
  search_space throws{{"y", conditional([](const config& c) -> domain { return c.at("nope"); })}};
  c = throws.sample(r);
  ASSERT_FALSE(c);
  EXPECT_TRUE(has(c.error().message(), "parameter \"y\": the conditional's function threw"))
      << c.error().message();
}

TEST(Grid, ExpandsEveryCombinationFirstFastest) {
  search_space s{{"a", grid_search({1, 2, 3})},
                 {"lr", uniform(0.0, 1.0)},
                 {"b", grid_search({"x", "y"})},
                 {"model", search_space{{"c", grid_search({true, false})}}}};
  EXPECT_FALSE(s.grid_only());
  auto g = s.grid();
  ASSERT_EQ(g.size(), 12u);
  EXPECT_EQ(g[0], (grid_point{{"/a", 1}, {"/b", "x"}, {"/model/c", true}}));
  EXPECT_EQ(g[1], (grid_point{{"/a", 2}, {"/b", "x"}, {"/model/c", true}}));
  EXPECT_EQ(g[3], (grid_point{{"/a", 1}, {"/b", "y"}, {"/model/c", true}}));
  EXPECT_EQ(g[11], (grid_point{{"/a", 3}, {"/b", "y"}, {"/model/c", false}}));
  std::set<std::string> distinct;
  rng r{5};
  for (const auto& p : g) {
    auto c = s.sample(r, p);
    ASSERT_TRUE(c);
    EXPECT_EQ((*c)["a"], p.at("/a"));
    EXPECT_EQ((*c)["b"], p.at("/b"));
    EXPECT_EQ((*c)["model"]["c"], p.at("/model/c"));
    distinct.insert((*c)["a"].dump() + (*c)["b"].dump() + (*c)["model"]["c"].dump());
  }
  EXPECT_EQ(distinct.size(), 12u);
  EXPECT_EQ(search_space({{"x", 1}}).grid().size(), 1u);
  EXPECT_TRUE(search_space({{"x", 1}, {"g", grid_search({1, 2})}}).grid_only());
}

TEST(Seeds, SameSeedSameConfigsDifferentSeedDifferent) {
  search_space s{{"lr", loguniform(1e-4, 1e-1)},
                 {"w", choice({64, 128, 256})},
                 {"d", randint(1, 9)},
                 {"m", search_space{{"q", quniform(0, 10, 0.5)}}}};
  auto a = draw(s, 50, 123), b = draw(s, 50, 123), c = draw(s, 50, 124);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int same_lr = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same_lr += a[i]["lr"] == c[i]["lr"];
  EXPECT_EQ(same_lr, 0);
}

TEST(Validation, RangeErrorsSayWhatToWrite) {
  EXPECT_EQ(error_of(uniform(1, 0), "lr"),
            "parameter \"lr\": uniform(1, 0): the low bound is above the high bound; write "
            "uniform(0, 1)");
  EXPECT_TRUE(has(error_of(uniform(1, 1)), "uniform(1, 1): the range is empty"));
  EXPECT_TRUE(has(error_of(uniform(1, 1)), "the constant 1 for a fixed value"));
  EXPECT_TRUE(has(error_of(uniform(NAN, 1)), "the bounds must be finite numbers"));
  EXPECT_TRUE(has(error_of(uniform(0, INFINITY)), "the bounds must be finite numbers"));
  EXPECT_EQ(error_of(loguniform(0, 0.1), "lr"),
            "parameter \"lr\": loguniform(0, 0.1): a log scale needs a low bound > 0 (the log of "
            "a number <= 0 is undefined); write e.g. loguniform(1e-05, 0.1), or uniform(0, 0.1) "
            "for a linear scale");
  EXPECT_TRUE(has(error_of(loguniform(-2, -1)), "a log scale needs positive bounds"));
  EXPECT_TRUE(has(error_of(loguniform(-2, -1)), "use uniform(-2, -1)"));
  EXPECT_TRUE(has(error_of(qloguniform(0, 10, 1)), "a log scale needs a low bound > 0"));
  EXPECT_TRUE(has(error_of(quniform(0, 1, 0)), "quniform(0, 1, 0): the step q must be a number > 0"));
  EXPECT_TRUE(has(error_of(quniform(0, 1, -1)), "or uniform(0, 1) for no step"));
  EXPECT_TRUE(has(error_of(quniform(0.1, 0.2, 1)), "no multiple of q=1 lies in [0.1, 0.2]"));
  EXPECT_TRUE(has(error_of(quniform(2, 1, 0.5)), "write quniform(1, 2, 0.5)"));
  EXPECT_EQ(error_of(randint(3, 3), "n"),
            "parameter \"n\": randint(3, 3): the range is empty: the high bound is exclusive, "
            "randint(lo, hi) gives lo..hi-1; write randint(3, 4) or the constant 3 for the single "
            "value 3");
  EXPECT_TRUE(has(error_of(randint(5, 1)), "write randint(1, 5) (the high bound is exclusive)"));
  EXPECT_TRUE(has(error_of(lograndint(0, 10)), "lograndint(0, 10): a log scale needs a low bound > 0"));
  EXPECT_TRUE(has(error_of(randint(0, std::int64_t{1} << 60)), "within +-2^53"));
}

TEST(Validation, ListAndNameErrors) {
  EXPECT_EQ(error_of(choice({}), "w"),
            "parameter \"w\": choice({}): there is nothing to choose from; give at least one "
            "option, e.g. choice({1, 2})");
  EXPECT_EQ(error_of(grid_search({}), "g"),
            "parameter \"g\": grid_search({}): the list is empty; give at least one value, e.g. "
            "grid_search({1, 2, 3})");
  EXPECT_TRUE(has(error_of(conditional(nullptr)), "conditional(<empty>): the function is empty"));

  search_space dup{{"lr", 0.1}, {"lr", uniform(0, 1)}};
  EXPECT_EQ(dup.validate().message(), "parameter \"lr\" is declared twice; names must be unique");
  EXPECT_EQ(dup.validate().code(), errc::already_exists);
  search_space nested_dup{{"m", search_space{{"a", 1}, {"a", 2}}}};
  EXPECT_EQ(nested_dup.validate().message(),
            "parameter \"m.a\" is declared twice; names must be unique (in \"m\")");
  search_space empty_name{{"ok", 1}, {"", 2}};
  EXPECT_EQ(empty_name.validate().message(), "parameter #2 has an empty name; give it a name");
  search_space dotted{{"a.b", 1}};
  EXPECT_TRUE(has(dotted.validate().message(), "parameter \"a.b\": names may not contain"));

  search_space deep{{"model", search_space{{"lr", loguniform(0, 1)}}}};
  EXPECT_TRUE(has(deep.validate().message(), "parameter \"model.lr\": loguniform(0, 1)"));
  search_space in_choice{{"o", choice({1, search_space{{"x", uniform(3, 2)}}})}};
  EXPECT_TRUE(has(in_choice.validate().message(), "parameter \"o[1].x\": uniform(3, 2)"));
  search_space grid_in_choice{{"o", choice({grid_search({1, 2}), 3})}};
  EXPECT_TRUE(has(grid_in_choice.validate().message(),
                  "parameter \"o[0]\": grid_search inside a choice option or a conditional"));
  // sample() reports the same error instead of sampling.
  rng r{1};
  auto c = deep.sample(r);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::invalid_argument);
  EXPECT_TRUE(has(c.error().message(), "model.lr"));
}

TEST(Validation, UnknownNames) {
  search_space s{{"lr", uniform(0, 1)}, {"model", search_space{{"depth", randint(1, 3)}}}};
  auto d = s.find("model.depth");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->describe(), "randint(1, 3)");
  auto u = s.find("lrr");
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code(), errc::not_found);
  EXPECT_EQ(u.error().message(), "unknown parameter \"lrr\"; the space has: lr, model");
  EXPECT_EQ(s.find("model.width").error().message(),
            "unknown parameter \"model.width\"; \"model\" has: depth");
  EXPECT_TRUE(has(s.find("lr.x").error().message(), "not a nested search_space"));

  EXPECT_TRUE(s.check({{"lr", 0.5}, {"model", {{"depth", 2}}}}));
  EXPECT_EQ(s.check({{"lr", 0.5}, {"model", {{"depth", 2}}}, {"mom", 1}}).message(),
            "unknown parameter \"mom\" in the configuration; the space has: lr, model");
  EXPECT_EQ(s.check({{"lr", 0.5}}).message(), "parameter \"model\" is missing from the configuration");
  EXPECT_TRUE(has(s.check({{"lr", 1.5}, {"model", {{"depth", 2}}}}).message(),
                  "parameter \"lr\": 1.5 lies outside uniform(0, 1)"));
  EXPECT_TRUE(has(s.check({{"lr", 0.5}, {"model", {{"depth", 3}}}}).message(),
                  "parameter \"model.depth\": 3 lies outside randint(1, 3)"));
}

}  // namespace
}  // namespace tune
