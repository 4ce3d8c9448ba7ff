#include "tune/tuner/space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>

#include "tune/core/json_text.hpp"

namespace tune {

namespace detail {
struct domain_data {
  domain::kind kind = domain::kind::constant;
  status err;
  nlohmann::json constant;
  numeric_spec num;
  std::vector<domain> options;
  choice_spec choices;
  std::vector<nlohmann::json> grid;
  std::shared_ptr<const search_space> sub;
  domain::condition_fn cond;
  std::string desc;
};
}  // namespace detail

namespace {

using detail::domain_data;

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

domain make(domain_data d) { return domain{std::make_shared<const domain_data>(std::move(d))}; }

domain bad(domain::kind k, std::string desc, std::string why) {
  domain_data d;
  d.kind = k;
  d.err = status{errc::invalid_argument, desc + ": " + why};
  d.desc = std::move(desc);
  return make(std::move(d));
}

const domain_data& null_data() {
  static const domain_data d{};
  return d;
}

// Checks shared by the real-valued factories; empty when fine.
std::string check_range(const char* fn, double lo, double hi, bool log, const std::string& args) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return "the bounds must be finite numbers";
  if (lo > hi)
    return "the low bound is above the high bound; write " + std::string(fn) + "(" + num(hi) +
           ", " + num(lo) + args + ")";
  if (lo == hi)
    return "the range is empty (low == high); write a low bound below the high bound, or the "
           "constant " +
           num(lo) + " for a fixed value";
  if (log && lo <= 0) {
    if (hi <= 0)
      return "a log scale needs positive bounds (the log of a number <= 0 is undefined); use "
             "uniform(" +
             num(lo) + ", " + num(hi) + ") for a linear scale";
    return "a log scale needs a low bound > 0 (the log of a number <= 0 is undefined); write "
           "e.g. " +
           std::string(fn) + "(" + num(hi * 1e-4) + ", " + num(hi) + args + "), or uniform(" +
           num(lo) + ", " + num(hi) + ") for a linear scale";
  }
  return {};
}

domain real(const char* fn, double lo, double hi, bool log, double q) {
  const bool quantized = q != 0 || std::string(fn).front() == 'q';
  const std::string args = quantized ? ", " + num(q) : std::string{};
  std::string desc = std::string(fn) + "(" + num(lo) + ", " + num(hi) + args + ")";
  if (auto why = check_range(fn, lo, hi, log, args); !why.empty())
    return bad(domain::kind::number, desc, why);
  if (quantized) {
    if (!(q > 0) || !std::isfinite(q))
      return bad(domain::kind::number, desc,
                 "the step q must be a number > 0; write e.g. " + std::string(fn) + "(" + num(lo) +
                     ", " + num(hi) + ", " + num((hi - lo) / 10) + "), or " +
                     (log ? "loguniform" : "uniform") + "(" + num(lo) + ", " + num(hi) +
                     ") for no step");
    if (std::floor(hi / q + 1e-9) < std::ceil(lo / q - 1e-9))
      return bad(domain::kind::number, desc,
                 "no multiple of q=" + num(q) + " lies in [" + num(lo) + ", " + num(hi) +
                     "]; use a smaller q or a wider range");
  }
  domain_data d;
  d.kind = domain::kind::number;
  d.num = numeric_spec{lo, hi, log, quantized ? q : 0.0, false};
  d.desc = std::move(desc);
  return make(std::move(d));
}

// Ray's qrandint and qlograndint: multiples of q in [lo, hi], hi included.
domain quantized_integer(const char* fn, std::int64_t lo, std::int64_t hi, std::int64_t q, bool log) {
  std::string desc = std::string(fn) + "(" + std::to_string(lo) + ", " + std::to_string(hi) + ", " + std::to_string(q) + ")";
  constexpr std::int64_t limit = std::int64_t{1} << 53;
  if (lo < -limit || hi > limit || lo > limit || hi < -limit)
    return bad(domain::kind::number, desc, "the bounds must lie within +-2^53");
  if (q < 1)
    return bad(domain::kind::number, desc,
               "the step q must be an integer >= 1; write e.g. " + std::string(fn) + "(" + std::to_string(lo) + ", " +
                   std::to_string(hi) + ", 1)");
  if (lo > hi)
    return bad(domain::kind::number, desc,
               "the low bound is above the high bound; write " + std::string(fn) + "(" + std::to_string(hi) + ", " +
                   std::to_string(lo) + ", " + std::to_string(q) + ") (both bounds are included)");
  if (log && lo <= 0)
    return bad(domain::kind::number, desc,
               "a log scale needs a low bound > 0 (the log of a number <= 0 is undefined); write e.g. " +
                   std::string(fn) + "(" + std::to_string(q) + ", " + std::to_string(hi) + ", " + std::to_string(q) +
                   "), or qrandint(" + std::to_string(lo) + ", " + std::to_string(hi) + ", " + std::to_string(q) +
                   ") for a linear scale");
  const double dq = static_cast<double>(q);
  if (std::floor(static_cast<double>(hi) / dq) < std::ceil(static_cast<double>(lo) / dq))
    return bad(domain::kind::number, desc,
               "no multiple of q=" + std::to_string(q) + " lies in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "]; use a smaller q or a wider range");
  domain_data d;
  d.kind = domain::kind::number;
  d.num = numeric_spec{static_cast<double>(lo), static_cast<double>(hi), log, dq, true};
  d.desc = std::move(desc);
  return make(std::move(d));
}

domain normal(const char* fn, double mean, double sd, double q, bool quantized) {
  std::string desc = std::string(fn) + "(" + num(mean) + ", " + num(sd) + (quantized ? ", " + num(q) : "") + ")";
  if (!std::isfinite(mean) || !std::isfinite(sd))
    return bad(domain::kind::number, desc, "the mean and the standard deviation must be finite numbers");
  if (!(sd > 0))
    return bad(domain::kind::number, desc,
               "the standard deviation must be > 0; write e.g. " + std::string(fn) + "(" + num(mean) + ", 1" +
                   (quantized ? ", " + num(q) : "") + "), or the constant " + num(mean) + " for a fixed value");
  if (quantized && (!(q > 0) || !std::isfinite(q)))
    return bad(domain::kind::number, desc,
               "the step q must be a number > 0; write e.g. qrandn(" + num(mean) + ", " + num(sd) + ", " + num(sd / 10) +
                   "), or randn(" + num(mean) + ", " + num(sd) + ") for no step");
  domain_data d;
  d.kind = domain::kind::number;
  const double inf = std::numeric_limits<double>::infinity();
  d.num = numeric_spec{-inf, inf, false, quantized ? q : 0.0, false, true, mean, sd};
  d.desc = std::move(desc);
  return make(std::move(d));
}

domain integer(const char* fn, std::int64_t lo, std::int64_t hi, bool log) {
  std::string desc = std::string(fn) + "(" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  constexpr std::int64_t limit = std::int64_t{1} << 53;
  if (lo < -limit || hi > limit || lo > limit || hi < -limit)
    return bad(domain::kind::number, desc, "the bounds must lie within +-2^53");
  if (lo > hi)
    return bad(domain::kind::number, desc,
               "the low bound is above the high bound; write " + std::string(fn) + "(" +
                   std::to_string(hi) + ", " + std::to_string(lo) + ") (the high bound is exclusive)");
  if (lo == hi)
    return bad(domain::kind::number, desc,
               "the range is empty: the high bound is exclusive, " + std::string(fn) +
                   "(lo, hi) gives lo..hi-1; write " + std::string(fn) + "(" + std::to_string(lo) +
                   ", " + std::to_string(lo + 1) + ") or the constant " + std::to_string(lo) +
                   " for the single value " + std::to_string(lo));
  if (log && lo <= 0)
    return bad(domain::kind::number, desc,
               "a log scale needs a low bound > 0 (the log of a number <= 0 is undefined); write "
               "e.g. " +
                   std::string(fn) + "(1, " + std::to_string(hi) + "), or randint(" +
                   std::to_string(lo) + ", " + std::to_string(hi) + ") for a linear scale");
  domain_data d;
  d.kind = domain::kind::number;
  d.num = numeric_spec{static_cast<double>(lo), static_cast<double>(hi - 1), log, 0.0, true};
  d.desc = std::move(desc);
  return make(std::move(d));
}

}  // namespace

// ---- domain ----------------------------------------------------------------------

domain::domain() : domain(make_constant(nullptr)) {}

domain domain::make_constant(nlohmann::json v) {
  domain_data d;
  d.kind = kind::constant;
  d.desc = json_text(v);
  d.constant = std::move(v);
  return make(std::move(d));
}

domain::domain(search_space sub) {
  domain_data d;
  d.kind = kind::nested;
  d.desc = "search_space{...}";
  d.sub = std::make_shared<const search_space>(std::move(sub));
  d_ = std::make_shared<const domain_data>(std::move(d));
}

domain::kind domain::what() const { return d_ ? d_->kind : kind::constant; }
const status& domain::error() const { return (d_ ? *d_ : null_data()).err; }
const nlohmann::json& domain::constant_value() const { return (d_ ? *d_ : null_data()).constant; }
const numeric_spec& domain::number() const { return (d_ ? *d_ : null_data()).num; }
const std::vector<domain>& domain::options() const { return (d_ ? *d_ : null_data()).options; }
const choice_spec& domain::choices() const { return (d_ ? *d_ : null_data()).choices; }
const std::vector<nlohmann::json>& domain::grid_values() const { return (d_ ? *d_ : null_data()).grid; }
const search_space& domain::subspace() const {
  static const search_space empty;
  return d_ && d_->sub ? *d_->sub : empty;
}
const domain::condition_fn& domain::condition() const { return (d_ ? *d_ : null_data()).cond; }
const std::string& domain::describe() const { return (d_ ? *d_ : null_data()).desc; }

domain uniform(double lo, double hi) { return real("uniform", lo, hi, false, 0); }
domain loguniform(double lo, double hi) { return real("loguniform", lo, hi, true, 0); }
domain quniform(double lo, double hi, double q) { return real("quniform", lo, hi, false, q); }
domain qloguniform(double lo, double hi, double q) { return real("qloguniform", lo, hi, true, q); }
domain randint(std::int64_t lo, std::int64_t hi) { return integer("randint", lo, hi, false); }
domain lograndint(std::int64_t lo, std::int64_t hi) { return integer("lograndint", lo, hi, true); }
domain qrandint(std::int64_t lo, std::int64_t hi, std::int64_t q) { return quantized_integer("qrandint", lo, hi, q, false); }
domain qlograndint(std::int64_t lo, std::int64_t hi, std::int64_t q) {
  return quantized_integer("qlograndint", lo, hi, q, true);
}
domain randn(double mean, double sd) { return normal("randn", mean, sd, 0, false); }
domain qrandn(double mean, double sd, double q) { return normal("qrandn", mean, sd, q, true); }

domain choice(std::vector<domain> options) {
  if (options.empty())
    return bad(domain::kind::choice, "choice({})",
               "there is nothing to choose from; give at least one option, e.g. choice({1, 2})");
  domain_data d;
  d.kind = domain::kind::choice;
  d.desc = "choice({";
  for (std::size_t i = 0; i < options.size(); ++i) d.desc += (i ? ", " : "") + options[i].describe();
  d.desc += "})";
  d.choices.n = options.size();
  d.options = std::move(options);
  return make(std::move(d));
}

domain choice(std::vector<domain> options, std::vector<double> weights) {
  domain plain = choice(options);
  if (!plain.error().is_ok()) return plain;
  std::string desc = plain.describe();
  desc.pop_back();
  desc += ", {";
  for (std::size_t i = 0; i < weights.size(); ++i) desc += (i ? ", " : "") + num(weights[i]);
  desc += "})";
  if (weights.size() != options.size())
    return bad(domain::kind::choice, desc,
               "there are " + std::to_string(options.size()) + " options and " + std::to_string(weights.size()) +
                   " weights; give one weight per option");
  double total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0)
      return bad(domain::kind::choice, desc,
                 "weight " + std::to_string(i) + " is " + num(weights[i]) + "; weights are finite numbers >= 0");
    total += weights[i];
  }
  if (!(total > 0))
    return bad(domain::kind::choice, desc, "every weight is 0; give at least one option a weight > 0");
  domain_data d;
  d.kind = domain::kind::choice;
  d.desc = std::move(desc);
  d.choices.n = options.size();
  for (double w : weights) d.choices.weights.push_back(w / total);
  d.options = std::move(options);
  return make(std::move(d));
}

domain grid_search(std::vector<nlohmann::json> values) {
  if (values.empty())
    return bad(domain::kind::grid, "grid_search({})",
               "the list is empty; give at least one value, e.g. grid_search({1, 2, 3})");
  domain_data d;
  d.kind = domain::kind::grid;
  d.desc = "grid_search(" + json_text(nlohmann::json(values)) + ")";
  d.grid = std::move(values);
  return make(std::move(d));
}

domain conditional(domain::condition_fn fn) {
  if (!fn)
    return bad(domain::kind::conditional, "conditional(<empty>)",
               "the function is empty; give a function of the partial config that returns a domain");
  domain_data d;
  d.kind = domain::kind::conditional;
  d.desc = "conditional(<function>)";
  d.cond = std::move(fn);
  return make(std::move(d));
}

// ---- samplers ---------------------------------------------------------------------

double param_sampler::snap(const numeric_spec& s, double x) {
  if (!std::isfinite(x)) x = s.normal ? s.mean : s.lo;
  if (s.integer) x = std::round(x);
  if (s.q > 0) {
    const double kmin = std::ceil(s.lo / s.q - 1e-9), kmax = std::floor(s.hi / s.q + 1e-9);
    x = std::clamp(std::round(x / s.q), kmin, kmax) * s.q;
  }
  return std::clamp(x, s.lo, s.hi);
}

double param_sampler::uniform_number(const numeric_spec& s, rng& r) {
  if (s.normal) return snap(s, s.mean + s.sd * r.normal());
  if (s.integer && s.q > 0 && !s.log) {  // qrandint: the multiples of q in [lo, hi], equally likely
    const double kmin = std::ceil(s.lo / s.q - 1e-9), kmax = std::floor(s.hi / s.q + 1e-9);
    return (kmin + static_cast<double>(r.below(static_cast<std::uint64_t>(kmax - kmin) + 1))) * s.q;
  }
  if (s.integer && s.q > 0) {  // qlograndint: log-uniform in [lo, hi], rounded to a multiple of q
    const double a = std::log(s.lo), b = std::log(s.hi);
    return snap(s, std::exp(a + r.uniform() * (b - a)));
  }
  if (s.integer && !s.log)
    return s.lo + static_cast<double>(r.below(static_cast<std::uint64_t>(s.hi - s.lo) + 1));
  if (s.integer) {  // lograndint: log-uniform in [lo, hi + 1), floored (as Ray)
    const double a = std::log(s.lo), b = std::log(s.hi + 1);
    return std::clamp(std::floor(std::exp(a + r.uniform() * (b - a))), s.lo, s.hi);
  }
  double x;
  if (s.log) {
    const double a = std::log(s.lo), b = std::log(s.hi);
    x = std::exp(a + r.uniform() * (b - a));
  } else {
    x = s.lo + r.uniform() * (s.hi - s.lo);
  }
  return s.q > 0 ? snap(s, x) : std::clamp(x, s.lo, s.hi);
}

double param_sampler::sample_number(const param_path&, const numeric_spec& spec, rng& r) {
  return uniform_number(spec, r);
}

std::size_t param_sampler::uniform_index(const choice_spec& spec, rng& r) {
  if (spec.weights.empty()) return static_cast<std::size_t>(r.below(spec.n));
  const double u = r.uniform();
  double acc = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < spec.weights.size(); ++i) {
    if (spec.weights[i] <= 0) continue;
    acc += spec.weights[i];
    last = i;
    if (u < acc) return i;
  }
  return last;
}

std::size_t param_sampler::sample_index(const param_path&, const choice_spec& spec, rng& r) {
  return uniform_index(spec, r);
}

// ---- search_space -----------------------------------------------------------------

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string names_of(const search_space& s) {
  std::string out;
  for (const auto& [name, d] : s.params()) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

status named(const std::string& dotted, const status& st) {
  return status{st.code(), "parameter " + quote(dotted) + ": " + st.message()};
}

status validate_space(const search_space& s, const std::string& prefix, bool dynamic);

status validate_domain(const domain& d, const std::string& dotted, bool dynamic) {
  if (!d.error().is_ok()) return named(dotted, d.error());
  switch (d.what()) {
    case domain::kind::grid:
      if (dynamic)
        return status{errc::invalid_argument,
                      "parameter " + quote(dotted) +
                          ": grid_search inside a choice option or a conditional cannot be "
                          "expanded into a grid; write choice(...) there, or move the "
                          "grid_search to a parameter outside the choice"};
      return status::ok();
    case domain::kind::choice:
      for (std::size_t i = 0; i < d.options().size(); ++i)
        if (auto st = validate_domain(d.options()[i], dotted + "[" + std::to_string(i) + "]", true);
            !st)
          return st;
      return status::ok();
    case domain::kind::nested:
      return validate_space(d.subspace(), dotted, dynamic);
    default:
      return status::ok();
  }
}

status validate_space(const search_space& s, const std::string& prefix, bool dynamic) {
  const auto& ps = s.params();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto& name = ps[i].first;
    const std::string where = prefix.empty() ? "" : " (in " + quote(prefix) + ")";
    if (name.empty())
      return status{errc::invalid_argument, "parameter #" + std::to_string(i + 1) + where +
                                                " has an empty name; give it a name"};
    if (name.find_first_of("/.#") != std::string::npos)
      return status{errc::invalid_argument,
                    "parameter " + quote(join(prefix, name)) +
                        ": names may not contain '/', '.' or '#'; for nesting write "
                        "{\"outer\", tune::search_space{{\"inner\", ...}}}"};
    for (std::size_t j = 0; j < i; ++j)
      if (ps[j].first == name)
        return status{errc::already_exists, "parameter " + quote(join(prefix, name)) +
                                                " is declared twice; names must be unique" + where};
    if (auto st = validate_domain(ps[i].second, join(prefix, name), dynamic); !st) return st;
  }
  return status::ok();
}

// partial: a nested space may leave out names (points to evaluate).
status check_value(const domain& d, const config& v, const std::string& dotted, bool partial = false);

// Walks the space, drawing each value with `sampler` — or, where `given` (a partial
// config) has one, keeping it after checking it against its domain.
struct walker {
  rng& r;
  const grid_point& point;
  param_sampler& sampler;
  trace* tr;
  const config& root;
  int depth = 0;

  status space(const search_space& s, const param_path& prefix, const std::string& dotted, config& out,
               const config* given) {
    if (given && !given->is_object())
      return status{errc::invalid_argument, "parameter " + quote(dotted) + ": " + json_text(*given) +
                                                " is not an object; the parameter is a nested search_space"};
    if (given)
      for (auto it = given->begin(); it != given->end(); ++it) {
        bool known = false;
        for (const auto& [name, d] : s.params()) known = known || name == it.key();
        if (!known)
          return status{errc::not_found, "unknown parameter " + quote(join(dotted, it.key())) + "; " +
                                             (dotted.empty() ? "the space" : quote(dotted)) + " has: " + names_of(s)};
      }
    out = config::object();
    for (const auto& [name, d] : s.params()) {
      config& slot = out[name];
      const config* g = given && given->contains(name) ? &(*given)[name] : nullptr;
      if (auto st = value(d, prefix + "/" + name, join(dotted, name), slot, false, g); !st) return st;
    }
    return status::ok();
  }

  status value(const domain& d, const param_path& path, const std::string& dotted, config& slot, bool dynamic,
               const config* given) {
    if (!d.error().is_ok()) return named(dotted, d.error());
    if (given && d.what() != domain::kind::nested && d.what() != domain::kind::choice &&
        d.what() != domain::kind::conditional)
      if (auto st = check_value(d, *given, dotted, true); !st) return st;
    switch (d.what()) {
      case domain::kind::constant:
        slot = d.constant_value();
        return status::ok();
      case domain::kind::number: {
        const auto& spec = d.number();
        double v = given ? given->get<double>() : param_sampler::snap(spec, sampler.sample_number(path, spec, r));
        if (tr) (*tr)[path] = observation{v, false};
        if (given) slot = *given;
        else if (spec.integer) slot = static_cast<std::int64_t>(v);
        else slot = v;
        return status::ok();
      }
      case domain::kind::choice:
        return choice(d, path, dotted, slot, given);
      case domain::kind::grid:
        if (dynamic) return validate_domain(d, dotted, true);
        return grid(d, path, slot, given);
      case domain::kind::nested: {
        if (auto st = validate_space(d.subspace(), dotted, dynamic); !st) return st;
        return space(d.subspace(), path, dotted, slot, given);
      }
      case domain::kind::conditional:
        return conditional(d, path, dotted, slot, given);
    }
    return status::ok();
  }

  // A choice: the option `given` fits (the first), or one the sampler draws.
  status choice(const domain& d, const param_path& path, const std::string& dotted, config& slot, const config* given) {
    const auto& opts = d.options();
    std::size_t i = 0;
    if (given) {
      while (i < opts.size() && !check_value(opts[i], *given, dotted, true).is_ok()) ++i;
      if (i == opts.size())
        return status{errc::invalid_argument,
                      "parameter " + quote(dotted) + ": " + json_text(*given) + " is none of the options of " + d.describe()};
    } else {
      i = std::min(sampler.sample_index(path, d.choices(), r), opts.size() - 1);
    }
    if (tr) (*tr)[path] = observation{static_cast<double>(i), true};
    return value(opts[i], path + "#" + std::to_string(i), dotted, slot, true, given);
  }

  // A grid parameter: the value given, the grid point's, or one the sampler draws.
  status grid(const domain& d, const param_path& path, config& slot, const config* given) {
    const auto& vals = d.grid_values();
    std::size_t i;
    if (given) {
      i = static_cast<std::size_t>(std::find(vals.begin(), vals.end(), *given) - vals.begin());
      slot = *given;
    } else if (auto it = point.find(path); it != point.end()) {
      i = static_cast<std::size_t>(std::find(vals.begin(), vals.end(), it->second) - vals.begin());
      slot = it->second;
    } else {
      i = std::min(sampler.sample_index(path, choice_spec{vals.size(), {}}, r), vals.size() - 1);
      slot = vals[i];
    }
    if (tr && i < vals.size()) (*tr)[path] = observation{static_cast<double>(i), true};
    return status::ok();
  }

  // A conditional: the domain its function returns for the config so far.
  status conditional(const domain& d, const param_path& path, const std::string& dotted, config& slot,
                     const config* given) {
    if (++depth > 32)
      return status{errc::invalid_argument,
                    "parameter " + quote(dotted) + ": conditionals nest more than 32 deep; return a plain domain"};
    domain resolved;
    try {
      resolved = d.condition()(root);
    } catch (const std::exception& e) {
      return status{errc::invalid_argument,
                    "parameter " + quote(dotted) + ": the conditional's function threw: " + e.what()};
    } catch (...) {
      return status{errc::invalid_argument, "parameter " + quote(dotted) + ": the conditional's function threw"};
    }
    if (auto st = validate_domain(resolved, dotted, true); !st) return st;
    auto st = value(resolved, path, dotted, slot, true, given);
    --depth;
    return st;
  }
};

void collect_grid(const search_space& s, const param_path& prefix,
                  std::vector<std::pair<param_path, const std::vector<nlohmann::json>*>>& out) {
  for (const auto& [name, d] : s.params()) {
    if (d.what() == domain::kind::grid && d.error().is_ok())
      out.emplace_back(prefix + "/" + name, &d.grid_values());
    else if (d.what() == domain::kind::nested)
      collect_grid(d.subspace(), prefix + "/" + name, out);
  }
}

bool space_grid_only(const search_space& s) {
  for (const auto& [name, d] : s.params()) {
    auto k = d.what();
    if (k == domain::kind::nested ? !space_grid_only(d.subspace())
                                  : k != domain::kind::constant && k != domain::kind::grid)
      return false;
  }
  return true;
}

status check_space(const search_space& s, const config& cfg, const std::string& prefix, bool partial);

// Whether `v` is a value the domain could produce (conditionals: anything).
status check_value(const domain& d, const config& v, const std::string& dotted, bool partial) {
  auto outside = [&](const std::string& why) {
    return status{errc::invalid_argument,
                  "parameter " + quote(dotted) + ": " + json_text(v) + " " + why + " " + d.describe()};
  };
  switch (d.what()) {
    case domain::kind::constant:
      return v == d.constant_value() ? status::ok() : outside("is not the constant");
    case domain::kind::number: {
      const auto& s = d.number();
      if (!v.is_number()) return outside("is not a number; the domain is");
      const double x = v.get<double>();
      if (s.integer && !v.is_number_integer()) return outside("is not an integer; the domain is");
      if (!std::isfinite(x)) return outside("is not a finite number; the domain is");
      const double tol = s.normal ? 0.0 : 1e-12 * std::max(1.0, std::fabs(s.hi) + std::fabs(s.lo));
      if (x < s.lo - tol || x > s.hi + tol) return outside("lies outside");
      if (s.q > 0 && std::fabs(x / s.q - std::round(x / s.q)) > 1e-6)
        return outside("is not a multiple of q in");
      return status::ok();
    }
    case domain::kind::choice:
      for (const auto& o : d.options())
        if (check_value(o, v, dotted, partial).is_ok()) return status::ok();
      return outside("is none of the options of");
    case domain::kind::grid:
      for (const auto& g : d.grid_values())
        if (g == v) return status::ok();
      return outside("is none of the values of");
    case domain::kind::nested:
      if (!v.is_object()) return outside("is not an object; the parameter is a nested");
      return check_space(d.subspace(), v, dotted, partial);
    case domain::kind::conditional:
      return status::ok();
  }
  return status::ok();
}

status check_space(const search_space& s, const config& cfg, const std::string& prefix, bool partial) {
  if (!cfg.is_object())
    return status{errc::invalid_argument,
                  "the configuration" + (prefix.empty() ? "" : " at " + quote(prefix)) +
                      " must be a JSON object of parameter names to values"};
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    bool known = false;
    for (const auto& [name, d] : s.params()) known = known || name == it.key();
    if (!known)
      return status{errc::not_found, "unknown parameter " + quote(join(prefix, it.key())) +
                                         " in the configuration; the space has: " + names_of(s)};
  }
  for (const auto& [name, d] : s.params()) {
    if (!cfg.contains(name) && partial) continue;
    if (!cfg.contains(name))
      return status{errc::invalid_argument,
                    "parameter " + quote(join(prefix, name)) + " is missing from the configuration"};
    if (auto st = check_value(d, cfg[name], join(prefix, name)); !st) return st;
  }
  return status::ok();
}

expected<config> accept_space(const search_space& s, const config& cfg, const std::string& prefix) {
  if (!cfg.is_object())
    return status{errc::invalid_argument, "the configuration" + (prefix.empty() ? "" : " at " + quote(prefix)) +
                                              " must be a JSON object of parameter names to values, not " + json_text(cfg)};
  config out = cfg;
  for (const auto& [name, d] : s.params()) {
    const auto dotted = join(prefix, name);
    if (d.what() == domain::kind::nested) {
      auto inner = accept_space(d.subspace(), cfg.contains(name) ? cfg[name] : config::object(), dotted);
      if (!inner) return inner.error();
      out[name] = std::move(*inner);
    } else if (!cfg.contains(name)) {
      if (d.what() != domain::kind::constant)
        return status{errc::invalid_argument, "it gives no value for parameter " + quote(dotted) + " (" + d.describe() +
                                                  " in the space): a searcher suggests every parameter of the space"};
      out[name] = d.constant_value();
    } else if (d.what() != domain::kind::constant) {  // a searcher's value overrides a constant, as Ray's merge
      if (auto st = check_value(d, cfg[name], dotted, false); !st) return st;
    }
  }
  return out;
}

}  // namespace

expected<config> search_space::accept(const config& suggested) const {
  if (auto st = validate(); !st) return st;
  return accept_space(*this, suggested, "");
}

search_space& search_space::add(std::string name, domain d) {
  params_.emplace_back(std::move(name), std::move(d));
  return *this;
}

status search_space::validate() const { return validate_space(*this, "", false); }

expected<domain> search_space::find(std::string_view dotted_name) const {
  const search_space* s = this;
  std::string seen;
  std::string_view rest = dotted_name;
  while (true) {
    auto dot = rest.find('.');
    std::string head{rest.substr(0, dot)};
    const domain* hit = nullptr;
    for (const auto& [name, d] : s->params())
      if (name == head) hit = &d;
    if (!hit)
      return status{errc::not_found,
                    "unknown parameter " + quote(join(seen, head)) + "; " +
                        (seen.empty() ? "the space" : quote(seen)) + " has: " + names_of(*s)};
    seen = join(seen, head);
    if (dot == std::string_view::npos) return *hit;
    if (hit->what() != domain::kind::nested)
      return status{errc::not_found, "parameter " + quote(seen) + " is " + hit->describe() +
                                         ", not a nested search_space; it has no " +
                                         quote(std::string{rest.substr(dot + 1)})};
    s = &hit->subspace();
    rest = rest.substr(dot + 1);
  }
}

bool search_space::grid_only() const { return space_grid_only(*this); }

std::vector<grid_point> search_space::grid() const {
  std::vector<std::pair<param_path, const std::vector<nlohmann::json>*>> axes;
  collect_grid(*this, "", axes);
  std::vector<grid_point> out;
  std::size_t total = 1;
  for (const auto& a : axes) total *= a.second->size();
  out.reserve(total);
  std::vector<std::size_t> idx(axes.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    grid_point p;
    for (std::size_t a = 0; a < axes.size(); ++a) p[axes[a].first] = (*axes[a].second)[idx[a]];
    out.push_back(std::move(p));
    for (std::size_t a = 0; a < axes.size(); ++a) {  // first axis fastest
      if (++idx[a] < axes[a].second->size()) break;
      idx[a] = 0;
    }
  }
  return out;
}

expected<config> search_space::sample(rng& r) const { return sample(r, grid_point{}); }

expected<config> search_space::sample(rng& r, const grid_point& point, param_sampler* sampler,
                                      trace* out_trace) const {
  if (auto st = validate(); !st) return st;
  param_sampler uniform_sampler;
  config out = config::object();
  walker w{r, point, sampler ? *sampler : uniform_sampler, out_trace, out};
  if (auto st = w.space(*this, "", "", out, nullptr); !st) return st;
  return out;
}

expected<config> search_space::complete(const config& partial, rng& r, const grid_point& point,
                                        param_sampler* sampler, trace* out_trace) const {
  if (auto st = validate(); !st) return st;
  if (!partial.is_object())
    return status{errc::invalid_argument,
                  "a point to evaluate must be a JSON object of parameter names to values, not " + json_text(partial)};
  param_sampler uniform_sampler;
  config out = config::object();
  walker w{r, point, sampler ? *sampler : uniform_sampler, out_trace, out};
  if (auto st = w.space(*this, "", "", out, &partial); !st) return st;
  return out;
}

status search_space::check(const config& cfg) const {
  if (auto st = validate(); !st) return st;
  return check_space(*this, cfg, "", false);
}

}  // namespace tune
