#include "tune/host/local_heads.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"
#include <sstream>

#include "tune/host/card_claims.hpp"

namespace tune {

namespace {

namespace fs = std::filesystem;

status make_folder(const std::string& dir) {
  std::error_code ec;
  auto parent = fs::path(dir).parent_path().string();
  for (auto& d : {parent, dir}) {
    if (::mkdir(d.c_str(), 01777) == 0) {
      ::chmod(d.c_str(), 01777);  // past the umask: every user's heads write here
      continue;
    }
    if (errno != EEXIST) return {errc::invalid_argument, "cannot make " + d + ": " + std::strerror(errno)};
    if (!fs::is_directory(d, ec))
      return {errc::invalid_argument, d + " is not a folder: remove it, or set TUNE_SHARED_DIR to another place"};
  }
  return status::ok();
}

}  // namespace

std::string heads_dir(const std::string& dir) { return dir.empty() ? shared_dir() + "/heads" : dir; }

status announce_head(const local_head& h, const std::string& dir) {
  auto folder = heads_dir(dir);
  if (auto s = make_folder(folder); !s) return s;
  auto path = folder + "/head-" + std::to_string(h.port) + ".json";
  auto tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  nlohmann::json j{{"address", h.address}, {"port", h.port}, {"pid", h.pid},           {"started", h.started},
                   {"uid", h.uid},         {"user", h.user}, {"token_file", h.token_file}, {"tls", h.tls},
                   {"version", h.version}};
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json_text(j) << "\n";
    if (!out) return {errc::invalid_argument, "cannot write " + tmp};
  }
  ::chmod(tmp.c_str(), 0644);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return {errc::invalid_argument, "cannot write " + path + " (" + ec.message() + "): a record of another user's head?"};
  }
  return status::ok();
}

void withdraw_head(int port, const std::string& dir) {
  std::error_code ec;
  fs::remove(heads_dir(dir) + "/head-" + std::to_string(port) + ".json", ec);
}

std::vector<local_head> local_heads(const std::string& dir) {
  std::vector<local_head> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(heads_dir(dir), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.rfind("head-", 0) != 0 || it->path().extension() != ".json") continue;
    auto j = read_json_file(it->path().string());
    if (!j.is_object()) continue;
    local_head h;
    h.address = j.value("address", "");
    h.port = j.value("port", 0);
    h.pid = j.value("pid", 0);
    h.started = j.value("started", uint64_t{0});
    h.uid = j.value("uid", uint32_t{0});
    h.user = j.value("user", "");
    h.token_file = j.value("token_file", "");
    h.tls = j.value("tls", false);
    h.version = j.value("version", "");
    if (h.address.empty() || h.pid <= 0) continue;
    if (process_start_time(h.pid) != h.started) {  // it has ended
      std::error_code gone;
      fs::remove(it->path(), gone);
      continue;
    }
    out.push_back(std::move(h));
  }
  std::sort(out.begin(), out.end(), [](const local_head& a, const local_head& b) { return a.port < b.port; });
  return out;
}

}  // namespace tune
