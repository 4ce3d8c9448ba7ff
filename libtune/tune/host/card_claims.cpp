#include "tune/host/card_claims.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace tune {

namespace {

namespace fs = std::filesystem;

// A node id as a file name: letters, digits, '.', '_', '-' kept, anything else '_'.
std::string file_name(const std::string& node) {
  std::string out;
  for (unsigned char c : node) out += std::isalnum(c) || c == '.' || c == '_' || c == '-' ? static_cast<char>(c) : '_';
  return out.empty() ? std::string{"_"} : out;
}

status make_shared_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  if (::mkdir(dir.c_str(), 01777) == 0) {
    ::chmod(dir.c_str(), 01777);  // past the umask
    return status::ok();
  }
  if (errno != EEXIST) return {errc::invalid_argument, "cannot make " + dir + ": " + std::strerror(errno)};
  struct stat s {};
  if (::lstat(dir.c_str(), &s) != 0 || !S_ISDIR(s.st_mode))
    return {errc::invalid_argument, dir + " is not a folder: remove it, or set TUNE_SHARED_DIR to another place"};
  return status::ok();
}

nlohmann::json to_json(const claimer& c) {
  nlohmann::json cards = nlohmann::json::object();
  for (auto& [uuid, k] : c.cards) cards[uuid] = {{"units", k.units}, {"memory", k.memory}};
  return {{"node", c.node}, {"pid", c.pid},   {"started", c.started}, {"uid", c.uid},
          {"user", c.user}, {"cgroup", c.cgroup}, {"cards", cards}};
}

bool from_json(const nlohmann::json& j, claimer& c) {
  if (!j.is_object()) return false;
  c.node = j.value("node", "");
  c.pid = j.value("pid", 0);
  c.started = j.value("started", uint64_t{0});
  c.uid = j.value("uid", uint32_t{0});
  c.user = j.value("user", "");
  c.cgroup = j.value("cgroup", "");
  if (c.pid <= 0 || !j.contains("cards") || !j["cards"].is_object()) return false;
  for (auto& [uuid, k] : j["cards"].items()) {
    if (!k.is_object()) return false;
    card_claim claim{k.value("units", int64_t{0}), k.value("memory", int64_t{0})};
    if (claim.units < 0 || claim.memory < 0) return false;
    c.cards[uuid] = claim;
  }
  return true;
}

}  // namespace

std::string shared_dir() {
  if (const char* d = std::getenv("TUNE_SHARED_DIR"); d && *d) return d;
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) ? "/dev/shm/libtune" : "/tmp/libtune-shared";
}

uint64_t process_start_time(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return 0;
  // After the command name (which may hold spaces and parentheses): field 3 onwards.
  auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

std::string user_name(uint32_t uid) {
  struct passwd pw {}, *found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return pw.pw_name;
  return "uid " + std::to_string(uid);
}

expected<std::unique_ptr<card_claims>> card_claims::open(const std::string& dir, claimer self) {
  if (auto st = make_shared_folder(fs::path(dir).parent_path().string()); !st) return st;
  if (auto st = make_shared_folder(dir); !st) return st;
  std::unique_ptr<card_claims> c{new card_claims};
  c->dir_ = dir;
  c->file_ = dir + "/" + file_name(self.node) + ".json";
  c->self_ = std::move(self);
  c->self_.cards.clear();
  int fd = ::open((dir + "/lock").c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return status{errc::invalid_argument, "cannot open " + dir + "/lock: " + std::strerror(errno)};
  ::close(fd);
  return c;
}

card_claims::~card_claims() {
  if (!written_) return;
  std::error_code ec;
  fs::remove(file_, ec);
}

card_claims::lock::~lock() {
  if (fd_ >= 0) ::close(fd_);  // closing lets the flock go
}

card_claims::lock card_claims::hold() const {
  int fd = ::open((dir_ + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lock{-1};
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() > until) {
      ::close(fd);
      return lock{-1};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return lock{fd};
}

std::vector<claimer> card_claims::others() const {
  std::vector<claimer> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    auto path = it->path().string();
    if (path == file_ || it->path().extension() != ".json") continue;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    claimer c;
    if (!from_json(nlohmann::json::parse(text.str(), nullptr, false), c)) continue;
    if (process_start_time(c.pid) != c.started) {  // its node has ended: it holds nothing
      std::error_code gone;
      fs::remove(path, gone);
      continue;
    }
    out.push_back(std::move(c));
  }
  return out;
}

status card_claims::write(const std::map<std::string, card_claim>& cards) {
  if (written_ && cards == self_.cards) return status::ok();
  std::error_code ec;
  if (cards.empty()) {
    fs::remove(file_, ec);
    self_.cards.clear();
    written_ = false;
    return status::ok();
  }
  auto next = self_;
  next.cards = cards;
  auto tmp = file_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << to_json(next).dump() << "\n";
    if (!out) return {errc::invalid_argument, "cannot write " + tmp};
  }
  ::chmod(tmp.c_str(), 0644);
  fs::rename(tmp, file_, ec);
  if (ec) return {errc::invalid_argument, "cannot write " + file_ + ": " + ec.message()};
  self_ = std::move(next);
  written_ = true;
  return status::ok();
}

}  // namespace tune
