#include "tune/trial/error_headline.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "tune/core/utf8.hpp"

namespace tune {

namespace {

// A continued exception message: at most this many lines after its first.
constexpr size_t message_lines = 8;

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool starts_with_nocase(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(p[i]))) return false;
  return true;
}

bool digit(char c) { return c >= '0' && c <= '9'; }

// A line as a terminal shows it: what follows its last "\r" (a progress bar's last
// drawing), without colour codes (ESC [ ... letter) or other control characters.
std::string clean_line(std::string_view line) {
  if (auto cr = line.find_last_of('\r'); cr != std::string_view::npos) {
    auto after = line.substr(cr + 1);
    if (!trim(after).empty()) line = after;
    else line = line.substr(0, cr);  // "\r" at its end: the drawing before it
    if (auto again = line.find_last_of('\r'); again != std::string_view::npos) line = line.substr(again + 1);
  }
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    auto c = static_cast<unsigned char>(line[i]);
    if (c == 0x1b) {  // ESC [ parameters final-byte; any other escape: ESC and the next byte
      if (i + 1 < line.size() && line[i + 1] == '[') {
        i += 2;
        while (i < line.size() && !(line[i] >= 0x40 && line[i] <= 0x7e)) ++i;
      } else {
        ++i;
      }
      continue;
    }
    if (c == '\t') out += ' ';
    else if (c >= 0x20 && c != 0x7f) out += static_cast<char>(c);
  }
  return out;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    auto end = nl == std::string_view::npos ? text.size() : nl;
    lines.push_back(clean_line(text.substr(start, end - start)));
    start = end + 1;
  }
  return lines;
}

bool blank(std::string_view s) { return trim(s).empty(); }
bool indented(std::string_view s) { return !s.empty() && (s[0] == ' ' || s[0] == '\t'); }

bool traceback_header(std::string_view s) { return trim(s) == "Traceback (most recent call last):"; }

// `  File "x.py", line 3` (and `, in f`): a traceback's frame.
bool frame_line(std::string_view s) { return indented(s) && starts_with(trim(s), "File \"") && s.find("\", line ") != s.npos; }

// A warning: Python's "file:12: SomeWarning: ..." (any word ending in "Warning:"),
// "warnings.warn(", lines that begin with "warning", PyTorch's "[W ...]", glog's
// "W1201 12:00:00", TensorFlow's "2024-01-01 12:00:00.000: W ..." and its info lines.
bool warning_line(std::string_view line) {
  auto s = trim(line);
  if (starts_with_nocase(s, "warning") || starts_with(s, "warnings.warn(")) return true;
  if (starts_with(s, "[W ") || (s.size() > 2 && s[0] == '[' && s[1] == 'W' && digit(s[2]))) return true;
  if (s.size() > 6 && s[0] == 'W' && digit(s[1]) && digit(s[2]) && digit(s[3]) && digit(s[4]) && s[5] == ' ') return true;
  for (auto p = s.find("Warning:"); p != std::string_view::npos; p = s.find("Warning:", p + 1)) {
    size_t w = p;  // the word's start
    while (w > 0 && (std::isalnum(static_cast<unsigned char>(s[w - 1])) || s[w - 1] == '_' || s[w - 1] == '.')) --w;
    if (w == 0 || s[w - 1] == ' ' || s[w - 1] == ':') return true;
  }
  // TensorFlow/absl: "2024-01-01 12:00:00.123456: W tensorflow/..." (I: information)
  if (s.size() > 24 && digit(s[0]) && s[4] == '-' && s[10] == ' ')
    if (auto p = s.find(": "); p != std::string_view::npos && p + 3 < s.size() && (s[p + 2] == 'W' || s[p + 2] == 'I') &&
                               s[p + 3] == ' ')
      return true;
  return false;
}

// Which lines are noise: warnings, and the indented source line Python prints under one.
std::vector<bool> noise_of(const std::vector<std::string>& lines) {
  std::vector<bool> noise(lines.size(), false);
  for (size_t i = 0; i < lines.size(); ++i)
    if (warning_line(lines[i])) {
      noise[i] = true;
      if (i + 1 < lines.size() && indented(lines[i + 1]) && !frame_line(lines[i + 1])) noise[++i] = true;
    }
  return noise;
}

std::string capped(std::string text) {
  text = shown_utf8(text);
  if (text.size() <= headline_bytes) return text;
  return std::string{utf8_prefix(text, headline_bytes - 3)} + "...";
}

// The file and line of a frame: `  File "/a/b/train.py", line 3` -> "train.py, line 3".
std::string frame_place(std::string_view frame) {
  auto s = trim(frame);
  auto q = s.find("\", line ");
  auto path = s.substr(6, q - 6);
  if (auto slash = path.find_last_of('/'); slash != std::string_view::npos) path = path.substr(slash + 1);
  auto rest = s.substr(q + 8);
  size_t n = 0;
  while (n < rest.size() && digit(rest[n])) ++n;
  return std::string{path} + ", line " + std::string{rest.substr(0, n)};
}

// The exception of the traceback whose lines begin at `from` (its header or its first
// frame): the first line at the left margin after its frames, and its message's
// continuation lines.
std::optional<std::string> exception_of(const std::vector<std::string>& lines, const std::vector<bool>& noise, size_t from) {
  size_t i = from;
  if (traceback_header(lines[i])) ++i;
  std::string place;
  while (i < lines.size() && (indented(lines[i]) || blank(lines[i]))) {
    if (frame_line(lines[i])) place = frame_place(lines[i]);
    if (blank(lines[i]) && !(i + 1 < lines.size() && indented(lines[i + 1]))) return std::nullopt;  // no exception line
    ++i;
  }
  if (i == lines.size()) return std::nullopt;
  std::string out{trim(lines[i])};
  for (size_t k = i + 1, taken = 0; k < lines.size() && taken < message_lines; ++k, ++taken) {
    if (blank(lines[k]) || noise[k] || traceback_header(lines[k]) || frame_line(lines[k]) ||
        starts_with(lines[k], "Exception ignored"))
      break;
    out += ' ';
    out += trim(lines[k]);
    if (out.size() > 4 * headline_bytes) break;
  }
  for (auto kind : {"SyntaxError", "IndentationError", "TabError"})
    if (!place.empty() && starts_with(out, kind) && (out.size() == std::string_view{kind}.size() || out[std::string_view{kind}.size()] == ':'))
      out += " (" + place + ")";
  return out;
}

// The last traceback's start: its header, or (a SyntaxError in the main script, or a
// tail that lost the header) the first frame of the last run of frames. One printed
// under "Exception ignored in" (at the interpreter's exit) counts only when no other
// does.
std::optional<size_t> last_traceback(const std::vector<std::string>& lines) {
  std::optional<size_t> found, ignored;
  for (size_t i = 0; i < lines.size(); ++i) {
    bool header = traceback_header(lines[i]);
    bool first_frame = frame_line(lines[i]) && (i == 0 || !(indented(lines[i - 1]) || traceback_header(lines[i - 1])));
    if (!header && !first_frame) continue;
    bool exit_noise = header && i > 0 && starts_with(trim(lines[i - 1]), "Exception ignored");
    (exit_noise ? ignored : found) = i;
  }
  return found ? found : ignored;
}

// An exception group's (Python 3.11): "  + Exception Group Traceback (most recent call
// last):", its frames and exception behind "  | ", then its sub-exceptions. Its line:
// the first behind the "|" under the "+" that is not indented.
bool group_header(std::string_view s) { return trim(s) == "+ Exception Group Traceback (most recent call last):"; }

std::optional<std::string> group_exception_of(const std::vector<std::string>& lines, size_t header) {
  auto column = lines[header].find('+');
  for (size_t i = header + 1; i < lines.size(); ++i) {
    auto& l = lines[i];
    if (l.size() <= column + 2 || l.compare(0, column, std::string(column, ' ')) != 0 || l[column] != '|') return std::nullopt;
    if (l[column + 1] == ' ' && l[column + 2] != ' ') return std::string{trim(std::string_view{l}.substr(column + 2))};
  }
  return std::nullopt;
}

}  // namespace

std::string error_headline(std::string_view stderr_tail) {
  auto lines = split_lines(stderr_tail);
  auto noise = noise_of(lines);
  auto tb = last_traceback(lines);
  for (size_t i = lines.size(); i-- > (tb ? *tb + 1 : 0);)
    if (group_header(lines[i])) {
      if (auto e = group_exception_of(lines, i)) return capped(*e);
      break;
    }
  if (tb)
    if (auto e = exception_of(lines, noise, *tb)) return capped(*e);
  // No traceback: the last line that is not a warning.
  std::optional<size_t> last, last_warning;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (blank(lines[i])) continue;
    (noise[i] ? last_warning : last) = i;
  }
  if (!last) return last_warning ? capped(std::string{trim(lines[*last_warning])}) : std::string{};
  std::string line{trim(lines[*last])};
  // A C++ program's uncaught exception: "terminate called after throwing an instance of
  // 'std::runtime_error'" then "  what():  boom".
  constexpr std::string_view terminate = "terminate called after throwing an instance of ";
  if (starts_with(line, "what():") && *last > 0) {
    std::string_view before = trim(lines[*last - 1]);
    if (starts_with(before, terminate)) return capped(std::string{before} + ": " + std::string{trim(std::string_view{line}.substr(7))});
  }
  return capped(line);
}

std::string error_kind(std::string_view error) {
  std::string_view kind = error;
  if (starts_with(kind, process_ended)) {
    if (auto colon = kind.find(": ", process_ended.size()); colon != std::string_view::npos) kind = kind.substr(colon + 2);
  }
  // " (failed 3 times)" at its end: how often, not what
  constexpr std::string_view failed = " (failed ";
  if (auto p = kind.rfind(failed); p != std::string_view::npos && kind.size() > p + failed.size()) {
    auto rest = kind.substr(p + failed.size());
    size_t n = 0;
    while (n < rest.size() && digit(rest[n])) ++n;
    if (n > 0 && rest.substr(n) == " times)") kind = kind.substr(0, p);
  }
  return std::string{kind};
}

std::vector<std::string> error_summary(const std::vector<errored_trial>& trials, size_t max_kinds) {
  struct group {
    std::string kind, where;
    size_t count = 0, first = 0;
  };
  std::vector<group> groups;
  std::map<std::string, size_t> index;  // by the kind with the trial's own id taken out
  for (size_t i = 0; i < trials.size(); ++i) {
    auto& t = trials[i];
    auto kind = error_kind(t.error);
    std::string key;  // the kind, each mention of the trial's id as one \x01
    for (size_t at = 0;;) {
      auto p = t.id.empty() ? std::string::npos : kind.find(t.id, at);
      key.append(kind, at, p == std::string::npos ? std::string::npos : p - at);
      if (p == std::string::npos) break;
      key += '\x01';
      at = p + t.id.size();
    }
    auto [it, added] = index.emplace(key, groups.size());
    if (added) groups.push_back({kind, t.where, 0, i});
    auto& g = groups[it->second];
    ++g.count;
    if (g.where.empty()) g.where = t.where;
  }
  std::stable_sort(groups.begin(), groups.end(), [](const group& a, const group& b) { return a.count > b.count; });
  std::vector<std::string> out;
  for (size_t i = 0; i < groups.size() && i < max_kinds; ++i) {
    auto& g = groups[i];
    out.push_back(std::to_string(g.count) + (g.count == 1 ? " trial: " : " trials: ") + shown_utf8(g.kind) +
                  (g.where.empty() ? "" : " (see " + g.where + ")"));
  }
  if (groups.size() > max_kinds)
    out.push_back("... and " + std::to_string(groups.size() - max_kinds) + " more kind" +
                  (groups.size() - max_kinds == 1 ? "" : "s") + " of error");
  return out;
}

}  // namespace tune
