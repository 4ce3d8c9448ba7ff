#include "tune/trial/output_metrics.hpp"

#include <re2/re2.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

enum class pattern_kind { single, pairs, named };

struct compiled {
  std::unique_ptr<re2::RE2> re;
  pattern_kind kind = pattern_kind::single;
  std::vector<std::pair<int, std::string>> named;  // group index -> metric
  int groups = 0;
};

// A captured value: a number when its text is one (a trailing comma, semicolon, bracket
// or percent sign allowed: "acc=0.91, loss=0.3" read with "acc=(\S+)"), else the text.
nlohmann::json value_of(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  std::string s(text);
  if (s.empty()) return nullptr;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str()) {
    bool rest_ok = true;
    for (const char* p = end; *p; ++p)
      if (std::string_view(",;)]}%' \t\r").find(*p) == std::string_view::npos) rest_ok = false;
    if (rest_ok && std::isfinite(v)) return v;  // "nan" stays text: the experiment names it as written
  }
  return s;
}

std::optional<int64_t> iteration_of(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1) return std::nullopt;
  return v;
}

}  // namespace

struct output_metrics::impl {
  std::vector<compiled> patterns;
  std::string metric;
};

output_metrics::output_metrics() : impl_(std::make_unique<impl>()) {}
output_metrics::~output_metrics() = default;
output_metrics::output_metrics(output_metrics&&) noexcept = default;
output_metrics& output_metrics::operator=(output_metrics&&) noexcept = default;
size_t output_metrics::size() const { return impl_->patterns.size(); }

expected<output_metrics> output_metrics::make(const std::vector<std::string>& patterns, const std::string& metric) {
  output_metrics out;
  out.impl_->metric = metric;
  for (auto& p : patterns) {
    re2::RE2::Options o;
    o.set_log_errors(false);
    compiled c;
    c.re = std::make_unique<re2::RE2>(p, o);
    if (!c.re->ok())
      return status{errc::invalid_argument, "metric pattern '" + p + "' is not a regular expression RE2 reads: " + c.re->error() +
                                                " (RE2's syntax, as Python's re without lookarounds or backreferences)"};
    c.groups = c.re->NumberOfCapturingGroups();
    for (auto& [name, index] : c.re->NamedCapturingGroups()) c.named.emplace_back(index, name);
    if (!c.named.empty()) {
      c.kind = pattern_kind::named;
    } else if (c.groups == 1) {
      if (metric.empty())
        return status{errc::invalid_argument, "metric pattern '" + p + "' has one group, for the experiment's metric, but the "
                                              "experiment names no metric"};
      c.kind = pattern_kind::single;
    } else if (c.groups >= 2) {
      c.kind = pattern_kind::pairs;
    } else {
      return status{errc::invalid_argument,
                    "metric pattern '" + p + "' captures nothing: give a group for the value (e.g. '" +
                        (metric.empty() ? std::string{"acc"} : metric) + "=(\\S+)'), two for name and value "
                        "('(\\w+)=(\\S+)'), or named groups ('acc=(?P<acc>\\S+) loss=(?P<loss>\\S+)')"};
    }
    out.impl_->patterns.push_back(std::move(c));
  }
  return out;
}

std::optional<std::string> output_metrics::report_line(std::string_view line) const {
  re2::StringPiece text(line.data(), line.size());
  std::vector<re2::StringPiece> sub;
  for (auto& c : impl_->patterns) {
    sub.assign(static_cast<size_t>(c.groups) + 1, {});
    if (!c.re->Match(text, 0, text.size(), re2::RE2::UNANCHORED, sub.data(), c.groups + 1)) continue;
    nlohmann::json metrics = nlohmann::json::object();
    std::optional<int64_t> iteration;
    auto put = [&](const std::string& name, re2::StringPiece v) {
      if (v.data() == nullptr) return;  // a group that took no part in the match
      if (name == "iteration") {
        iteration = iteration_of({v.data(), v.size()});
        return;
      }
      auto value = value_of({v.data(), v.size()});
      if (!value.is_null()) metrics[name] = std::move(value);
    };
    if (c.kind == pattern_kind::single) {
      put(impl_->metric, sub[1]);
    } else if (c.kind == pattern_kind::named) {
      for (auto& [index, name] : c.named) put(name, sub[static_cast<size_t>(index)]);
    } else {
      for (;;) {
        if (sub[1].data() != nullptr) put(std::string(sub[1].data(), sub[1].size()), sub[2]);
        size_t next = static_cast<size_t>(sub[0].data() - text.data()) + std::max<size_t>(sub[0].size(), 1);
        if (next > text.size()) break;
        if (!c.re->Match(text, next, text.size(), re2::RE2::UNANCHORED, sub.data(), c.groups + 1)) break;
      }
    }
    if (metrics.empty()) continue;
    nlohmann::json report{{"type", "result"}, {"metrics", std::move(metrics)}};
    if (iteration) report["iteration"] = *iteration;
    return json_text(report);
  }
  return std::nullopt;
}

}  // namespace tune
