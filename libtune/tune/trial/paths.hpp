// Paths that come from elsewhere (a worker's report, a client's request, a node's file
// list) and must stay inside a folder: one check for all of them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>

namespace tune {

// A relative name that stays inside the folder it is taken from: not empty, not
// absolute, no ".." part.
inline bool stays_inside(const std::filesystem::path& name) {
  return !name.empty() && !name.is_absolute() && std::none_of(name.begin(), name.end(), [](auto& p) { return p == ".."; });
}

// `path` is `root` or below it, part by part (both canonical).
inline bool within(const std::filesystem::path& root, const std::filesystem::path& path) {
  return std::mismatch(root.begin(), root.end(), path.begin(), path.end()).first == root.end();
}

// The canonical form of `path` (links resolved) when it is an existing folder strictly
// inside `root`; else an empty path.
inline std::filesystem::path folder_inside(const std::filesystem::path& root, const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto r = fs::canonical(root, ec);
  if (ec) return {};
  auto dir = fs::canonical(path, ec);
  if (ec || !fs::is_directory(dir) || dir == r) return {};
  return within(r, dir) ? dir : std::filesystem::path{};
}

}  // namespace tune
