// Search spaces: what a tuner may choose for each hyperparameter (Ray Tune's
// tune.uniform, tune.choice, tune.grid_search, ... in C++). Pure: no CAF, no CUDA.
//
//   tune::search_space space{
//       {"lr", tune::loguniform(1e-4, 1e-1)},
//       {"width", tune::choice({128, 256, 512})},
//       {"epochs", 20},                                        // a constant
//       {"model", tune::search_space{{"depth", tune::randint(1, 5)}}},   // nested
//       {"optimizer", tune::choice({                           // conditional: a choice
//            tune::search_space{{"name", "sgd"},               //   of sub-spaces
//                               {"momentum", tune::uniform(0.0, 0.99)}},
//            tune::search_space{{"name", "adam"}}})},
//       {"batch", tune::conditional([](const tune::config& c) -> tune::domain {
//            return c["width"].get<int>() > 256 ? tune::choice({32, 64})   // depends on
//                                               : tune::choice({64, 128});  // a sampled value
//        })},
//       {"seed", tune::grid_search({1, 2, 3})}};
//   if (auto st = space.validate(); !st) std::cerr << st.message();
//   tune::rng r{42};
//   auto cfg = space.sample(r);   // expected<config>: {"lr": ..., "model": {"depth": 3}, ...}
//
// Factories never throw and never assert: a bad domain (empty range, log of a
// non-positive bound, ...) carries its error, and validate()/sample() report it with
// the parameter's name and what to write instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/tuner/common.hpp"
#include "tune/tuner/rng.hpp"

namespace tune {

class search_space;
class domain;

// A numeric domain: real or integer, linear or log scale, uniform or normal,
// optionally quantized. Values lie in [lo, hi]; for integers hi is the largest value
// (randint's exclusive bound minus one); a normal domain's bounds are -inf and +inf.
struct numeric_spec {
  double lo = 0, hi = 1;
  bool log = false;      // uniform in log(value)
  double q = 0;          // > 0: values are multiples of q, round(x / q) * q; 0: none (ints: step 1)
  bool integer = false;  // the value is an integer (JSON integer in the config)
  bool normal = false;   // normal with `mean` and `sd` instead of uniform (randn)
  double mean = 0, sd = 1;
};

// A choice's (or a grid's) options: how many, and their weights (empty: all equal).
struct choice_spec {
  std::size_t n = 0;
  std::vector<double> weights;  // > 0 each, summing to 1, when given
};

namespace detail {
struct domain_data;
}

// One parameter's domain. Implicit from a JSON value (a constant) and from a
// search_space (a nested group of parameters).
class domain {
 public:
  enum class kind { constant, number, choice, grid, nested, conditional };
  using condition_fn = std::function<domain(const config& partial)>;

  domain();  // the constant null
  template <class T>
    requires(!std::is_same_v<std::remove_cvref_t<T>, domain>) &&
            (!std::is_same_v<std::remove_cvref_t<T>, search_space>) &&
            std::is_constructible_v<nlohmann::json, T>
  domain(T&& value)  // NOLINT: implicit by design (constants)
      : domain(make_constant(nlohmann::json(std::forward<T>(value)))) {}
  domain(search_space sub);  // NOLINT: implicit by design (nested parameters)

  kind what() const;
  // The factory's error (ok for a well-formed domain; nested spaces are checked by
  // search_space::validate).
  const status& error() const;

  const nlohmann::json& constant_value() const;      // kind::constant
  const numeric_spec& number() const;                // kind::number
  const std::vector<domain>& options() const;        // kind::choice
  const choice_spec& choices() const;                // kind::choice: n and weights
  const std::vector<nlohmann::json>& grid_values() const;  // kind::grid
  const search_space& subspace() const;              // kind::nested
  const condition_fn& condition() const;             // kind::conditional
  // How the factory was written, for messages: "loguniform(0.0001, 0.1)".
  const std::string& describe() const;

  // Internal: build from parts (the factories below use this).
  explicit domain(std::shared_ptr<const detail::domain_data> d) : d_(std::move(d)) {}

 private:
  static domain make_constant(nlohmann::json v);
  std::shared_ptr<const detail::domain_data> d_;
};

// Reals uniform in [lo, hi). Needs lo < hi, both finite.
domain uniform(double lo, double hi);
// Reals whose logarithm is uniform: each decade equally likely. Needs 0 < lo < hi.
domain loguniform(double lo, double hi);
// Reals uniform in [lo, hi], rounded to a multiple of q: round(x / q) * q, kept inside
// [lo, hi] (Ray's and Hyperopt's quniform). Needs q > 0 and a multiple of q in range.
domain quniform(double lo, double hi, double q);
// As quniform, on a log scale. Needs 0 < lo.
domain qloguniform(double lo, double hi, double q);
// Reals from a normal distribution (Ray's randn): unbounded. Needs a finite mean and
// sd > 0.
domain randn(double mean, double sd);
// As randn, rounded to a multiple of q (Ray's qrandn). Needs q > 0.
domain qrandn(double mean, double sd, double q);
// Integers in [lo, hi) — hi is EXCLUSIVE, as in Ray Tune and Python's range:
// randint(0, 10) gives 0..9. Needs lo < hi.
domain randint(std::int64_t lo, std::int64_t hi);
// Integers in [lo, hi) with a log-uniform distribution. Needs 0 < lo < hi.
domain lograndint(std::int64_t lo, std::int64_t hi);
// Multiples of q in [lo, hi] — here hi is INCLUSIVE, as in Ray's qrandint:
// qrandint(0, 100, 25) gives 0, 25, 50, 75, 100. Needs q >= 1 and a multiple in range.
domain qrandint(std::int64_t lo, std::int64_t hi, std::int64_t q);
// As qrandint, log-uniform (Ray's qlograndint; hi inclusive). Needs 0 < lo.
domain qlograndint(std::int64_t lo, std::int64_t hi, std::int64_t q);
// One of the options, each equally likely. An option is any domain: a JSON value,
// a search_space (its parameters are then present only when it is chosen), or
// another random domain.
domain choice(std::vector<domain> options);
// One of the options, option i with probability weights[i] / sum (Hyperopt's
// pchoice). Needs one weight per option, each finite and >= 0, some > 0. TPE starts
// from these weights (its prior) and learns from there.
domain choice(std::vector<domain> options, std::vector<double> weights);
// Every value is tried: random and grid search run each combination of all
// grid_search parameters (× num_samples). Values are JSON of any type. Allowed at the
// top level and in nested spaces, not inside choice options or conditionals.
domain grid_search(std::vector<nlohmann::json> values);
// A domain that depends on parameters sampled before it (declaration order, depth
// first): `fn` gets the configuration so far (the whole config, from its root) and
// returns the domain to sample from — a constant, a random domain, a sub-space.
// An exception thrown by fn becomes an error of sample().
domain conditional(domain::condition_fn fn);

// Where the search walks while sampling: "/model/depth" for a nested parameter,
// "/optimizer#0/momentum" inside option 0 of a choice.
using param_path = std::string;

// What a sampler chose at a path: a value (numeric domains, in the value's own scale)
// or an option index (choice and grid domains).
struct observation {
  double value = 0;
  bool categorical = false;
};
using trace = std::map<param_path, observation>;

// How values are drawn. The default draws uniformly (random search); TPE overrides
// both. The walk through the space (nesting, conditions, grid assignment) is shared.
class param_sampler {
 public:
  virtual ~param_sampler() = default;
  // A value of the numeric domain (must respect lo, hi, q, integer).
  virtual double sample_number(const param_path& path, const numeric_spec& spec, rng& r);
  // An option index in [0, spec.n).
  virtual std::size_t sample_index(const param_path& path, const choice_spec& spec, rng& r);

  // The default transforms, usable by any sampler.
  static double uniform_number(const numeric_spec& spec, rng& r);
  static std::size_t uniform_index(const choice_spec& spec, rng& r);  // by the weights
  // Snap a value into the domain: quantize, round integers, clamp to [lo, hi].
  static double snap(const numeric_spec& spec, double x);
};

// A fixed value for each grid_search parameter, by path ("/seed", "/model/width").
using grid_point = std::map<param_path, nlohmann::json>;

class search_space {
 public:
  using entry = std::pair<std::string, domain>;

  search_space() = default;
  search_space(std::initializer_list<entry> params) : params_(params) {}
  explicit search_space(std::vector<entry> params) : params_(std::move(params)) {}

  // Append a parameter (checked by validate()).
  search_space& add(std::string name, domain d);

  const std::vector<entry>& params() const { return params_; }
  std::size_t size() const { return params_.size(); }
  bool empty() const { return params_.empty(); }

  // The first problem, naming the parameter ("model.lr") and what to write instead:
  // a bad domain, an empty or duplicate name, a name with '/', grid_search inside a
  // choice option. Conditional domains are checked when sampled.
  status validate() const;

  // The domain at a dotted name ("lr", "model.depth"); an unknown name is an error
  // that lists the names there are.
  expected<domain> find(std::string_view dotted_name) const;

  // Whether every parameter is a constant or grid_search (nested spaces included).
  bool grid_only() const;
  // Every combination of the grid_search values, the first declared parameter varying
  // fastest; one empty point when there is no grid_search.
  std::vector<grid_point> grid() const;

  // A configuration. Grid parameters take their value from `point` when it has one,
  // else a value drawn uniformly from their list. `sampler` (default: uniform) draws
  // each value; `out_trace` (optional) receives what was drawn at each path.
  expected<config> sample(rng& r) const;
  expected<config> sample(rng& r, const grid_point& point, param_sampler* sampler = nullptr,
                          trace* out_trace = nullptr) const;

  // Checks a configuration written by hand (e.g. a starting point) against the space:
  // unknown names, missing names, values outside their domain.
  status check(const config& cfg) const;
  // A searcher's configuration (a searcher of the user's own, which may have a space of
  // its own): the space's constants added where it gives none, each value it gives for
  // a parameter the space declares checked against its domain; a random domain it gives
  // no value for is an error naming it. Names the space does not have are the
  // searcher's own, kept.
  expected<config> accept(const config& suggested) const;

  // A configuration that keeps every value `partial` gives (each checked against its
  // domain; for a choice, the first option that could produce it is the one taken) and
  // draws the others as sample() does: a point to evaluate first, written in full or
  // in part. An unknown name or a value outside its domain is an error naming it.
  expected<config> complete(const config& partial, rng& r, const grid_point& point = {},
                            param_sampler* sampler = nullptr, trace* out_trace = nullptr) const;

 private:
  std::vector<entry> params_;
};

}  // namespace tune
