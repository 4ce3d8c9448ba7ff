#include "tune/host/card_claims.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

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

// One node's file in a card's folder: who it is and what it holds on that card.
nlohmann::json to_json(const claimer& c, const card_claim& k) {
  return {{"node", c.node}, {"pid", c.pid},       {"started", c.started}, {"uid", c.uid},
          {"user", c.user}, {"cgroup", c.cgroup}, {"units", k.units},    {"memory", k.memory}};
}

bool from_json(const nlohmann::json& j, claimer& c, card_claim& k) {
  if (!j.is_object()) return false;
  c.node = j.value("node", "");
  c.pid = j.value("pid", 0);
  c.started = j.value("started", uint64_t{0});
  c.uid = j.value("uid", uint32_t{0});
  c.user = j.value("user", "");
  c.cgroup = j.value("cgroup", "");
  k = {j.value("units", int64_t{0}), j.value("memory", int64_t{0})};
  return c.pid > 0 && k.units >= 0 && k.memory >= 0;
}

}  // namespace

std::string shared_dir() {
  if (const char* d = std::getenv("TUNE_SHARED_DIR"); d && *d) return d;
  std::error_code ec;
  return fs::is_directory("/dev/shm", ec) ? "/dev/shm/libtune" : "/tmp/libtune-shared";
}

nlohmann::json read_json_file(const std::string& path) {
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nlohmann::json::value_t::discarded;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return parse_json(text);
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

std::string card_claims::card_dir(const std::string& uuid) const { return dir_ + "/" + file_name(uuid); }

expected<std::unique_ptr<card_claims>> card_claims::open(const std::string& dir, claimer self,
                                                         const std::vector<std::string>& cards) {
  if (auto st = make_shared_folder(fs::path(dir).parent_path().string()); !st) return st;
  if (auto st = make_shared_folder(dir); !st) return st;
  std::unique_ptr<card_claims> c{new card_claims};
  c->dir_ = dir;
  c->file_name_ = file_name(self.node) + ".json";
  c->self_ = std::move(self);
  c->self_.cards.clear();
  c->cards_ = cards;
  std::sort(c->cards_.begin(), c->cards_.end());
  c->cards_.erase(std::unique(c->cards_.begin(), c->cards_.end()), c->cards_.end());
  for (auto& uuid : c->cards_) {
    auto folder = c->card_dir(uuid);
    if (auto st = make_shared_folder(folder); !st) return st;
    int fd = ::open((folder + "/lock").c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return status{errc::invalid_argument, "cannot open " + folder + "/lock: " + std::strerror(errno)};
    c->lock_fds_.push_back(fd);
  }
  c->seen_.resize(c->cards_.size());
  return c;
}

card_claims::~card_claims() {
  std::error_code ec;
  for (auto& [uuid, k] : self_.cards) fs::remove(card_dir(uuid) + "/" + file_name_, ec);
  for (int fd : lock_fds_) ::close(fd);
}

card_claims::lock::~lock() {
  for (int fd : fds_) ::flock(fd, LOCK_UN);
}

card_claims::lock card_claims::hold(const std::vector<std::string>& cards) const {
  lock l;
  std::vector<size_t> wanted;
  for (auto& uuid : cards)
    if (auto it = std::lower_bound(cards_.begin(), cards_.end(), uuid); it != cards_.end() && *it == uuid)
      wanted.push_back(static_cast<size_t>(it - cards_.begin()));
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (size_t i : wanted) {
    int fd = lock_fds_[i];
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() > until) return l;  // lets go of what it had
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    l.fds_.push_back(fd);
    l.cards_.push_back(i);
  }
  l.ok_ = true;
  return l;
}

namespace {
int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

std::vector<claimer> card_claims::others(const std::vector<std::string>& fresh) const {
  std::map<std::string, claimer> by_node;  // a node's claims on several cards: one claimer
  for (size_t i = 0; i < cards_.size(); ++i) {
    auto& uuid = cards_[i];
    auto folder = card_dir(uuid);
    auto& seen = seen_[i];
    bool look = !seen.read || std::find(fresh.begin(), fresh.end(), uuid) != fresh.end();
    auto now = look ? mtime_ns(folder) : seen.mtime_ns;  // before reading: a change after it shows next time
    if (!seen.read || now != seen.mtime_ns) {
      seen = {true, now, {}, {}};
      DIR* d = ::opendir(folder.c_str());
      if (!d) continue;
      while (auto* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == file_name_ || name.size() < 6 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
        claimer c;
        card_claim k;
        if (!from_json(read_json_file(folder + "/" + name), c, k)) continue;
        seen.files.emplace_back(std::move(c), k);
        seen.names.push_back(name);
      }
      ::closedir(d);
    }
    for (size_t f = 0; f < seen.files.size(); ++f) {
      auto& [c, k] = seen.files[f];
      if (process_start_time(c.pid) != c.started) {  // its node has ended: it holds nothing
        ::unlink((folder + "/" + seen.names[f]).c_str());
        seen.read = false;  // read again next time
        continue;
      }
      by_node.try_emplace(seen.names[f], c).first->second.cards[uuid] = k;
    }
  }
  std::vector<claimer> out;
  for (auto& [name, c] : by_node) out.push_back(std::move(c));
  return out;
}

status card_claims::write(const std::map<std::string, card_claim>& cards, const lock* held) {
  if (cards == self_.cards) return status::ok();
  auto changed = [&](const std::string& uuid) {
    auto a = cards.find(uuid);
    auto b = std::as_const(self_.cards).find(uuid);
    return (a == cards.end()) != (b == self_.cards.end()) || (a != cards.end() && !(a->second == b->second));
  };
  std::set<std::string> uuids;
  for (auto& [u, k] : cards) uuids.insert(u);
  for (auto& [u, k] : self_.cards) uuids.insert(u);
  for (auto& uuid : uuids)  // nothing is written when one is wrong
    if (!std::binary_search(cards_.begin(), cards_.end(), uuid))
      return {errc::invalid_argument, "card " + uuid + " is not one of this node's"};
  // The locks of the cards it changes that `held` does not hold.
  std::vector<std::string> more;
  for (auto& uuid : uuids) {
    auto i = static_cast<size_t>(std::lower_bound(cards_.begin(), cards_.end(), uuid) - cards_.begin());
    if (changed(uuid) && !(held && held->covers(i))) more.push_back(uuid);
  }
  std::optional<lock> extra;
  if (!more.empty()) extra.emplace(hold(more));
  for (auto& uuid : uuids) {
    if (!changed(uuid)) continue;
    auto path = card_dir(uuid) + "/" + file_name_;
    auto k = cards.find(uuid);
    // Its own change is no news: under the card's lock nobody else writes there, so the
    // folder as read stays true (else it is read again).
    auto i = static_cast<size_t>(std::lower_bound(cards_.begin(), cards_.end(), uuid) - cards_.begin());
    bool locked = (held && held->covers(i)) || (extra && extra->covers(i));
    bool was_current = locked && seen_[i].read && seen_[i].mtime_ns == mtime_ns(card_dir(uuid));
    auto after = [&] { seen_[i].mtime_ns = was_current ? mtime_ns(card_dir(uuid)) : -2; };
    if (k == cards.end() || (k->second.units == 0 && k->second.memory == 0)) {
      ::unlink(path.c_str());
      after();
      continue;
    }
    auto tmp = path + ".tmp";
    auto text = json_text(to_json(self_, k->second)) + "\n";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return {errc::invalid_argument, "cannot write " + tmp + ": " + std::strerror(errno)};
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::fchmod(fd, 0644);
    ::close(fd);
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
      return {errc::invalid_argument, "cannot write " + path + ": " + std::strerror(errno)};
    after();
  }
  self_.cards = cards;
  return status::ok();
}

}  // namespace tune
