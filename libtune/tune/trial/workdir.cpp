#include "tune/trial/workdir.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/core/quantity.hpp"
#include "tune/trial/paths.hpp"
#include "tune/trial/sha256.hpp"

namespace tune {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(path);
  while (std::getline(in, part, '/'))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// A manifest path: relative, '/'-separated, no empty, "." or ".." part.
bool clean_relative(const std::string& p) {
  if (p.empty() || p.size() > 4096 || p.front() == '/' || p.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    auto part = std::string_view(p).substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// Whether a link at `path` with `target` (relative) stays inside the top folder.
bool link_stays_inside(const std::string& path, const std::string& target) {
  if (target.empty() || target.front() == '/') return false;
  auto resolved = (fs::path(path).parent_path() / target).lexically_normal();
  return resolved.empty() || resolved == "." || stays_inside(resolved);
}

// Matches the parts of a path against the parts of a pattern; "**" spans any number.
bool match_parts(const std::vector<std::string>& pat, size_t i, const std::vector<std::string>& name, size_t j) {
  if (i == pat.size()) return j == name.size();
  if (pat[i] == "**") {
    for (size_t k = j; k <= name.size(); ++k)
      if (match_parts(pat, i + 1, name, k)) return true;
    return false;
  }
  if (j == name.size()) return false;
  if (::fnmatch(pat[i].c_str(), name[j].c_str(), 0) != 0) return false;
  return match_parts(pat, i + 1, name, j + 1);
}

std::string shown_size(uint64_t bytes) { return format_bytes(static_cast<int64_t>(bytes)); }

// Copies a blob into place: a clone when the file system can (no bytes copied), else
// copy_file_range, else read and write.
status copy_blob(const std::string& from, const std::string& to, bool executable) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return status{errc::not_found, "cannot read " + from + ": " + std::strerror(errno)};
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, executable ? 0755 : 0644);
  if (out < 0) {
    int e = errno;
    ::close(in);
    return status{errc::invalid_argument, "cannot create " + to + ": " + std::strerror(e)};
  }
  bool ok = ::ioctl(out, FICLONE, in) == 0;
  if (!ok) {
    ok = true;
    for (;;) {
      ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
      if (n > 0) continue;
      if (n == 0) break;
      if (errno == EINTR) continue;
      if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
        ok = false;
        break;
      }
      char buf[1 << 16];  // copy_file_range cannot here: plain reads and writes
      for (;;) {
        ssize_t r = ::read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          ok = r == 0;
          break;
        }
        for (ssize_t at = 0; at < r;) {
          ssize_t w = ::write(out, buf + at, static_cast<size_t>(r - at));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) {
            ok = false;
            break;
          }
          at += w;
        }
        if (!ok) break;
      }
      break;
    }
  }
  int e = errno;
  ::close(in);
  if (::close(out) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) return status{errc::invalid_argument, "cannot write " + to + ": " + std::strerror(e)};
  ::chmod(to.c_str(), executable ? 0755 : 0644);  // not narrowed by the umask
  return status::ok();
}

}  // namespace

uint64_t workdir_manifest::bytes() const {
  uint64_t n = 0;
  for (auto& f : files) n += f.size;
  return n;
}

// Names are kept byte for byte (exact_name: {"hex": ...} for one that is not UTF-8): a
// trial's copy has the very names of the folder.
std::string workdir_manifest::to_json() const {
  nlohmann::json j{{"dirs", nlohmann::json::array()}, {"files", nlohmann::json::array()}, {"links", nlohmann::json::array()}};
  for (auto& d : dirs) j["dirs"].push_back(exact_name(d));
  for (auto& f : files)
    j["files"].push_back({{"path", exact_name(f.path)}, {"size", f.size}, {"sha256", f.sha256}, {"x", f.executable}});
  for (auto& l : links) j["links"].push_back({{"path", exact_name(l.path)}, {"target", exact_name(l.target)}});
  return json_text(j);
}

expected<workdir_manifest> workdir_manifest::from_json(const std::string& text) {
  auto j = parse_json(text);
  auto bad = [](const std::string& why) { return status{errc::invalid_argument, "the working directory's manifest " + why}; };
  if (!j.is_object() || !j.contains("dirs") || !j["dirs"].is_array() || !j.contains("files") || !j["files"].is_array() ||
      !j.contains("links") || !j["links"].is_array())
    return bad("is not one (dirs, files and links expected)");
  workdir_manifest m;
  std::set<std::string> seen;
  auto take = [&](const nlohmann::json& p) -> expected<std::string> {
    auto name = exact_name_from(p);
    if (!name || !clean_relative(*name)) return bad("names a path outside the folder or malformed: " + json_text(p));
    if (!seen.insert(*name).second) return bad("names " + shown_utf8(*name) + " twice");
    return *name;
  };
  for (auto& d : j["dirs"]) {
    auto p = take(d);
    if (!p) return p.error();
    m.dirs.push_back(*p);
  }
  for (auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f.contains("size") || !f["size"].is_number_unsigned() ||
        !f.contains("sha256") || !f["sha256"].is_string() || !is_sha256_hex(f["sha256"].get<std::string>()))
      return bad("has a malformed file entry: " + json_text(f).substr(0, 200));
    auto p = take(f["path"]);
    if (!p) return p.error();
    m.files.push_back({*p, f["size"].get<uint64_t>(), f["sha256"], f.contains("x") && f["x"].is_boolean() && f["x"].get<bool>()});
  }
  for (auto& l : j["links"]) {
    auto target = l.is_object() && l.contains("target") ? exact_name_from(l["target"]) : std::nullopt;
    if (!l.is_object() || !l.contains("path") || !target)
      return bad("has a malformed link entry: " + json_text(l).substr(0, 200));
    auto p = take(l["path"]);
    if (!p) return p.error();
    if (!link_stays_inside(*p, *target))
      return bad("has a link that points outside the folder: " + shown_utf8(*p) + " -> " + shown_utf8(*target));
    m.links.push_back({*p, *target});
  }
  return m;
}

// --- .tuneignore -----------------------------------------------------------------------

expected<ignore_rules> ignore_rules::parse(const std::string& text, const std::string& source) {
  ignore_rules out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '!')
      return status{errc::invalid_argument, source + ":" + std::to_string(number) + ": '" + line +
                                                "': negated patterns (!) are not supported; list only what to leave out"};
    rule r;
    if (line.back() == '/') {
      r.dir_only = true;
      line.pop_back();
    }
    auto inner = line.find('/', line[0] == '/' ? 1 : 0);
    r.anchored = line[0] == '/' || inner != std::string::npos;
    r.parts = split(line);
    if (r.parts.empty()) continue;  // "/" alone
    out.rules_.push_back(std::move(r));
  }
  return out;
}

bool ignore_rules::ignored(const std::string& path, bool dir) const {
  auto parts = split(path);
  if (parts.empty()) return false;
  for (auto& r : rules_) {
    if (r.dir_only && !dir) continue;
    if (r.anchored) {
      if (match_parts(r.parts, 0, parts, 0)) return true;
    } else if (::fnmatch(r.parts[0].c_str(), parts.back().c_str(), 0) == 0) {
      return true;  // a name pattern: matched against the entry's own name (its parents were checked on the way)
    }
  }
  return false;
}

// --- scanning --------------------------------------------------------------------------

expected<scanned_workdir> scan_workdir(const std::string& root_arg, const scan_limits& limits) {
  std::error_code ec;
  if (!fs::exists(root_arg, ec)) return status{errc::not_found, "the working directory " + root_arg + " does not exist"};
  if (!fs::is_directory(root_arg, ec)) return status{errc::invalid_argument, "the working directory " + root_arg + " is not a folder"};
  auto root = fs::canonical(root_arg, ec);
  if (ec) return status{errc::invalid_argument, "cannot read the working directory " + root_arg + ": " + ec.message()};
  scanned_workdir out;
  out.root = root.string();
  ignore_rules rules;
  auto ignore_file = root / ".tuneignore";
  if (fs::exists(fs::symlink_status(ignore_file, ec))) {
    std::ifstream in(ignore_file);
    if (!in) return status{errc::invalid_argument, "cannot read " + ignore_file.string() + ": " + std::strerror(errno)};
    std::string text{std::istreambuf_iterator<char>(in), {}};
    auto r = ignore_rules::parse(text, ignore_file.string());
    if (!r) return r.error();
    rules = std::move(*r);
  }
  std::set<fs::path> excluded;
  for (auto& e : limits.exclude) {
    auto c = fs::weakly_canonical(e, ec);
    if (!ec) excluded.insert(c);
  }
  struct candidate {
    std::string rel, abs;
    uint64_t size;
    bool executable;
  };
  std::vector<candidate> files;
  uint64_t bytes = 0;
  bool over = false;
  auto how_to_leave_out = " (leave it out with a line in " + ignore_file.string() + ")";
  // Depth first, names in order: the same folder gives the same manifest.
  std::vector<std::string> pending{""};
  while (!pending.empty()) {
    auto rel_dir = std::move(pending.back());
    pending.pop_back();
    auto abs_dir = rel_dir.empty() ? root : root / rel_dir;
    std::vector<fs::directory_entry> entries;
    for (auto it = fs::directory_iterator(abs_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      entries.push_back(*it);
    if (ec)
      return status{errc::invalid_argument, "cannot read the folder " + abs_dir.string() + ": " + ec.message() +
                                                (rel_dir.empty() ? "" : how_to_leave_out)};
    std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.path().filename() < b.path().filename(); });
    std::vector<std::string> subdirs;
    for (auto& e : entries) {
      auto name = e.path().filename().string();
      auto rel = rel_dir.empty() ? name : rel_dir + "/" + name;
      auto st = e.symlink_status(ec);
      if (ec) return status{errc::invalid_argument, "cannot read " + e.path().string() + ": " + ec.message() + how_to_leave_out};
      bool is_dir = fs::is_directory(st);
      if (name == ".git" || name == "__pycache__" || (rel == "tune_results" && is_dir) ||
          excluded.count(e.path()) || rules.ignored(rel, is_dir)) {
        ++out.ignored;
        continue;
      }
      if (fs::is_symlink(st)) {
        auto target = fs::read_symlink(e.path(), ec);
        if (ec) return status{errc::invalid_argument, "cannot read the link " + e.path().string() + ": " + ec.message()};
        auto stored = target.is_absolute() ? target.lexically_relative(abs_dir) : target;
        auto resolved = fs::weakly_canonical(e.path(), ec);
        bool inside = !ec && link_stays_inside(rel, stored.string()) && within(root, resolved);
        if (!inside)
          return status{errc::invalid_argument,
                        "the working directory's link " + rel + " points outside it (to " + target.string() +
                            "): nodes would not have what it points to; leave it out with a line in " +
                            ignore_file.string() + " (e.g. " + rel + "), or copy what it points to into the folder"};
        out.manifest.links.push_back({rel, stored.string()});
      } else if (is_dir) {
        out.manifest.dirs.push_back(rel);
        subdirs.push_back(rel);
      } else if (fs::is_regular_file(st)) {
        if (::access(e.path().c_str(), R_OK) != 0)
          return status{errc::invalid_argument, "cannot read " + e.path().string() + ": " + std::strerror(errno) + how_to_leave_out};
        auto size = static_cast<uint64_t>(e.file_size(ec));
        bytes += size;
        files.push_back({rel, e.path().string(), size, (st.permissions() & fs::perms::owner_exec) != fs::perms::none});
        // Far over a limit (a home folder): stop walking, the error says enough.
        if (bytes > 10 * limits.max_bytes || files.size() > 2 * limits.max_files) {
          over = true;
          break;
        }
      } else {
        out.skipped.push_back(rel);  // a socket, a pipe, a device: nothing to ship
      }
    }
    if (over) break;
    std::reverse(subdirs.begin(), subdirs.end());  // popped in name order
    for (auto& s : subdirs) pending.push_back(std::move(s));
  }
  if (over || bytes > limits.max_bytes || files.size() > limits.max_files) {
    auto largest = files;
    std::sort(largest.begin(), largest.end(), [](auto& a, auto& b) { return a.size > b.size; });
    std::string list;
    for (size_t i = 0; i < largest.size() && i < 5; ++i)
      list += (i ? ", " : "") + largest[i].rel + " (" + shown_size(largest[i].size) + ")";
    std::string what = bytes > limits.max_bytes ? shown_size(bytes) + (over ? " or more" : "") + ", over the limit of " +
                                                      shown_size(limits.max_bytes)
                                                : std::to_string(files.size()) + (over ? " or more" : "") +
                                                      " files, over the limit of " + std::to_string(limits.max_files);
    return status{errc::invalid_argument,
                  "the working directory " + out.root + " holds " + what + " (it is shipped to every node that runs a trial); " +
                      "its largest files: " + list + ". Leave out what the trials do not need with a .tuneignore file in " +
                      out.root + " (one pattern a line, as in .gitignore), or raise the limit"};
  }
  for (auto& f : files) {
    auto sha = sha256_file(f.abs);
    if (!sha) return status{errc::invalid_argument, "cannot read " + f.abs + ": " + sha.error().message() + how_to_leave_out};
    out.manifest.files.push_back({f.rel, f.size, *sha, f.executable});
    out.sources.push_back(f.abs);
  }
  return out;
}

// --- a trial's copy ----------------------------------------------------------------------

status materialize_workdir(const workdir_manifest& m, const std::string& blobs, const std::string& dest) {
  std::error_code ec;
  if (!fs::create_directory(dest, ec) || ec)
    return status{errc::invalid_argument, "cannot create " + dest + ": " + (ec ? ec.message() : "it exists already")};
  for (auto& d : m.dirs) {
    fs::create_directories(fs::path(dest) / d, ec);
    if (ec) return status{errc::invalid_argument, "cannot create " + dest + "/" + d + ": " + ec.message()};
  }
  for (auto& f : m.files) {
    auto to = fs::path(dest) / f.path;
    fs::create_directories(to.parent_path(), ec);
    if (ec) return status{errc::invalid_argument, "cannot create " + to.parent_path().string() + ": " + ec.message()};
    if (auto s = copy_blob(blobs + "/" + f.sha256, to.string(), f.executable); !s) return s;
  }
  for (auto& l : m.links) {
    auto at = fs::path(dest) / l.path;
    fs::create_directories(at.parent_path(), ec);
    if (!ec) fs::create_symlink(l.target, at, ec);
    if (ec) return status{errc::invalid_argument, "cannot make the link " + at.string() + ": " + ec.message()};
  }
  return status::ok();
}

}  // namespace tune
