// Metrics read from a trial's standard output, for programs that know nothing of
// libtune (docs/programs.md): patterns the experiment gives, matched against each line
// with RE2 (linear time whatever the pattern: a line cannot stall the node).
//
//   "val_acc=(\S+)"                        one group: the value of the experiment's metric
//   "(\w+)=([-+0-9.eE]+)"                  two or more groups, none named: name and value
//                                          pairs, every match on the line (Katib's way)
//   "epoch (?P<iteration>\d+) acc=(?P<acc>\S+) loss=(?P<loss>\S+)"
//                                          named groups: one metric each; "iteration"
//                                          names the result's iteration instead
//
// A line that matches a pattern is one result (the first pattern that matches wins);
// other lines are only output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

class output_metrics {
 public:
  // Compiles the patterns; `metric` is what a one-group pattern's value is. A pattern
  // that does not compile or has no group is an error naming it and what to write.
  static expected<output_metrics> make(const std::vector<std::string>& patterns, const std::string& metric);
  ~output_metrics();
  output_metrics(output_metrics&&) noexcept;
  output_metrics& operator=(output_metrics&&) noexcept;

  // The result one line reports, as a report line ({"type": "result", "metrics": {...}}
  // with "iteration" when a pattern names it): metrics whose text is a number are
  // numbers, others strings (the experiment then stops the trial, saying so). None
  // when no pattern matches.
  std::optional<std::string> report_line(std::string_view line) const;

  size_t size() const;

 private:
  output_metrics();
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tune
