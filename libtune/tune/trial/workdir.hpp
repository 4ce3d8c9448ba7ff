// A trial's working directory, shipped to the nodes by content (docs/programs.md).
//
// The driver scans the folder into a manifest: every file with its size, SHA-256 and
// whether it is executable, every folder, every symbolic link (only links that stay
// inside). `.git`, `__pycache__`, libtune's own `tune_results` and the patterns of a
// `.tuneignore` file at the top (gitignore-like, below) are left out. A folder over the
// size or file limit, a file that cannot be read or a link that points outside is an
// error naming it and what to do.
//
// A node fetches the manifest and the files it lacks into a cache of blobs named by
// their SHA-256, and gives each trial a copy of its own (materialize): what one trial
// changes never reaches another, nor the cache.
//
// .tuneignore: one pattern a line; blank lines and lines starting with # are skipped;
// a trailing / matches folders only; a pattern with a / elsewhere is matched against
// the path from the top (a leading / is dropped), one without against every name on
// the path; * ? and [...] match within a name, ** any number of folders. Negation (!)
// is not supported: such a line is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct workdir_file {
  std::string path;  // relative, '/'-separated
  uint64_t size = 0;
  std::string sha256;
  bool executable = false;
};

struct workdir_link {
  std::string path, target;  // target: relative to the link's folder, staying inside
};

struct workdir_manifest {
  std::vector<std::string> dirs;  // every folder (parents before children)
  std::vector<workdir_file> files;
  std::vector<workdir_link> links;

  uint64_t bytes() const;
  std::string to_json() const;
  // Read back and checked as a node must (the manifest comes from elsewhere): paths
  // relative and inside, no repeated path, hashes of 64 hex digits, link targets inside.
  static expected<workdir_manifest> from_json(const std::string& text);
};

class ignore_rules {
 public:
  // The patterns of a .tuneignore file (`source` names it in errors).
  static expected<ignore_rules> parse(const std::string& text, const std::string& source);
  // Whether `path` (relative, '/'-separated) is left out; `dir` when it is a folder.
  bool ignored(const std::string& path, bool dir) const;
  size_t size() const { return rules_.size(); }

 private:
  struct rule {
    std::vector<std::string> parts;  // split at '/'
    bool anchored = false, dir_only = false;
  };
  std::vector<rule> rules_;
};

struct scan_limits {
  uint64_t max_bytes = 100ull << 20;
  uint64_t max_files = 20000;
  // Absolute folders left out as well (the experiment's own folder when it is inside).
  std::vector<std::string> exclude = {};
};

struct scanned_workdir {
  std::string root;  // canonical
  workdir_manifest manifest;
  std::vector<std::string> sources;  // absolute path of each manifest file, in order
  std::vector<std::string> skipped;  // sockets, pipes, devices: not shipped
  int ignored = 0;                   // entries left out by the rules
};

// Scans `root` (a folder) into a manifest, hashing every file.
expected<scanned_workdir> scan_workdir(const std::string& root, const scan_limits& limits = {});

// Writes the manifest's folders, files (from `blobs`/<sha256>) and links into `dest`,
// which must not exist yet. Files are copies (a clone where the file system can),
// 0755 when executable, else 0644.
status materialize_workdir(const workdir_manifest& m, const std::string& blobs, const std::string& dest);

}  // namespace tune
