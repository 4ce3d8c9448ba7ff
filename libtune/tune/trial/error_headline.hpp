// What a failed trial's error says: the cause, read from the end of its standard error,
// and the errors of an experiment grouped by it (docs/programs.md, "When a trial
// fails"). Pure: text in, text out.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tune {

// How a failed trial's error begins; then how its process ended ("exit code 1",
// "killed by signal 9 (Killed)", "... after the stop request") and, when its standard
// error says why, ": " and the headline.
inline constexpr std::string_view process_ended = "the trial's process ended with ";

// The longest headline, in bytes (longer ones are cut on a character boundary and end
// with "...").
inline constexpr size_t headline_bytes = 300;

// The cause of a failure, from the end of what the process wrote to its standard error:
// - a Python traceback's exception (the last traceback's; one printed under "Exception
//   ignored in" only when there is no other): its line and the lines of a message that
//   spans several, up to a blank line or a warning, joined with spaces; a SyntaxError
//   (IndentationError, TabError) with the file's name and line, "(train.py, line 3)";
// - otherwise the last line that is not a warning (Python's "file:12: XWarning: ..."
//   and the source line under it, "warnings.warn(", lines that begin with "Warning" or
//   "WARNING", PyTorch's "[W ...]", glog's "W1201 ..."); a C++ program's "terminate
//   called after throwing an instance of 'T'" with its "what():" line is one headline;
//   only warnings: the last of them;
// - nothing written (or only blank lines): empty.
// Line ends may be "\n" or "\r\n"; of a line redrawn with "\r" (a progress bar) the last
// drawing counts; terminal colour codes and other control characters are dropped and
// ill-formed UTF-8 becomes U+FFFD.
std::string error_headline(std::string_view stderr_tail);

// The part of a trial's error that names the kind of failure: the headline of
// "the trial's process ended with ...: <headline>", without a trailing " (failed N
// times)"; any other error whole.
std::string error_kind(std::string_view error);

struct errored_trial {
  std::string id;     // trial-00001
  std::string error;  // its error as recorded
  std::string where;  // what to look at for more (its standard error's file); may be empty
};

// One line per kind of error (error_kind, the trial's own id in it not counted), the
// most frequent first, then in the order first seen: "24 trials: <kind> (see <where>
// of the first such trial)" ("1 trial: ..."). At most `max_kinds` lines, then "... and
// N more kinds of error". No trials: no lines.
std::vector<std::string> error_summary(const std::vector<errored_trial>& trials, size_t max_kinds = 10);

}  // namespace tune
