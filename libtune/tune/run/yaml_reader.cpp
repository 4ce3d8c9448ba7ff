#include "tune/run/yaml_reader.hpp"

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <set>

namespace tune::yaml_reader {

nlohmann::json scalar_value(const YAML::Node& n) {
  const std::string& v = n.Scalar();
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return v;
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  static const std::regex integer{R"([-+]?[0-9]+)"};
  static const std::regex real{R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)"};
  if (std::regex_match(v, integer)) {
    errno = 0;
    long long i = std::strtoll(v.c_str(), nullptr, 10);
    if (errno == 0) return static_cast<int64_t>(i);
  }
  if (std::regex_match(v, real)) return std::strtod(v.c_str(), nullptr);
  return v;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string suggestion(const std::string& key, const std::vector<std::string>& known,
                       const std::map<std::string, std::string>& aliases) {
  if (auto a = aliases.find(key); a != aliases.end()) return " (libtune calls it " + a->second + ")";
  std::string best;
  size_t best_d = 3;
  for (auto& k : known)
    if (auto d = edit_distance(key, k); d < best_d) best_d = d, best = k;
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::string joined(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

status known_keys(const reader& r, const YAML::Node& map, const std::string& path, const std::vector<std::string>& known,
                  const std::map<std::string, std::string>& aliases) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) return r.error(it->first, path, "keys are names");
    auto key = it->first.Scalar();
    if (!seen.insert(key).second) return r.error(it->first, joined(path, key), "given twice");
    if (std::find(known.begin(), known.end(), key) == known.end())
      return r.error(it->first, joined(path, key),
                     "unknown key" + suggestion(key, known, aliases) + "; " + (path.empty() ? "an experiment" : path) +
                         " has: " + listed(known));
  }
  return status::ok();
}

expected<YAML::Node> load(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    std::string at = e.mark.is_null() ? "" : ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    return status{errc::invalid_argument, source + at + ": not valid YAML or JSON: " + e.msg};
  }
}

std::filesystem::path from_base(const std::string& base, const std::string& p) {
  namespace fs = std::filesystem;
  return fs::path(p).is_absolute() ? fs::path(p) : (fs::path(base) / p).lexically_normal();
}

}  // namespace tune::yaml_reader
