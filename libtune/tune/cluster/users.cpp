#include "tune/cluster/users.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "tune/cluster/token.hpp"
#include "tune/core/clock.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/sqlite.hpp"

namespace tune {

namespace {

status bad(const std::string& what) { return {errc::invalid_argument, what}; }

constexpr const char* schema = R"sql(
CREATE TABLE IF NOT EXISTS users(
  name TEXT PRIMARY KEY, token TEXT NOT NULL UNIQUE, settings TEXT NOT NULL, created REAL NOT NULL);
)sql";

std::string folder_of(const std::string& file) {
  auto slash = file.rfind('/');
  return slash == std::string::npos ? std::string{"."} : file.substr(0, slash == 0 ? 1 : slash);
}

nlohmann::json quota_json(const std::optional<quantity>& q) {
  return q ? nlohmann::json(q->to_double()) : nlohmann::json(nullptr);
}

nlohmann::json settings_json(const user_limits& l) {
  return {{"gpus", quota_json(l.gpus)},
          {"cpus", quota_json(l.cpus)},
          {"max_trials", l.max_trials ? nlohmann::json(*l.max_trials) : nlohmann::json(nullptr)},
          {"priority", l.priority},
          {"weight", l.weight},
          {"account", l.account}};
}

expected<std::optional<quantity>> quota_from(const nlohmann::json& v, const char* key) {
  if (v.is_null()) return std::optional<quantity>{};
  if (!v.is_number()) return bad(std::string{key} + " must be a number of " + key + " (or null: no quota)");
  auto q = quantity::from_double(v.get<double>(), key);
  if (!q) return q.error();
  return std::optional<quantity>{*q};
}

}  // namespace

status check_user_name(std::string_view name) {
  auto ok_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; };
  if (name.empty() || name.size() > 32 || !(name[0] >= 'a' && name[0] <= 'z') || !std::all_of(name.begin(), name.end(), ok_char))
    return bad('"' + std::string{name} +
               "\" is not a user name: use 1 to 32 lower-case letters, digits, '_' or '-', starting with a letter");
  if (name == "admin" || name == "node")
    return bad('"' + std::string{name} + "\" is reserved (the admin token and the node token go by it); choose another name");
  return status::ok();
}

status check_account_name(std::string_view name) {
  auto ok_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; };
  std::string_view body = !name.empty() && name.back() == '$' ? name.substr(0, name.size() - 1) : name;
  if (body.empty() || name.size() > 32 || !((body[0] >= 'a' && body[0] <= 'z') || body[0] == '_') ||
      !std::all_of(body.begin(), body.end(), ok_char))
    return bad('"' + std::string{name} + "\" is not a Unix account name (lower-case letters, digits, '_' and '-', at most 32)");
  return status::ok();
}

nlohmann::json to_json(const user_record& u, bool with_token) {
  auto j = settings_json(u.limits);
  j["name"] = u.name;
  j["created"] = u.created;
  if (with_token) j["token"] = u.token;
  return j;
}

expected<user_limits> limits_from_json(const nlohmann::json& j, user_limits l) {
  if (!j.is_object()) return bad("a user's settings must be a JSON object");
  for (auto& [key, v] : j.items()) {
    if (key == "gpus" || key == "cpus") {
      auto q = quota_from(v, key == "gpus" ? "gpus" : "cpus");
      if (!q) return q.error();
      (key == "gpus" ? l.gpus : l.cpus) = *q;
    } else if (key == "max_trials") {
      if (v.is_null()) l.max_trials.reset();
      else if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1000000)
        return bad("max_trials must be a whole number from 1 to 1000000 (or null: no limit)");
      else l.max_trials = v.get<int64_t>();
    } else if (key == "priority") {
      if (!v.is_number_integer() || std::llabs(v.get<int64_t>()) > 1000000)
        return bad("priority must be a whole number from -1000000 to 1000000 (higher goes first)");
      l.priority = v.get<int64_t>();
    } else if (key == "weight") {
      if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() <= 1e6))
        return bad("weight must be a number above 0 and at most 1000000 (the user's share of the cluster, relative to others')");
      l.weight = v.get<double>();
    } else if (key == "account") {
      if (!v.is_string()) return bad("account must be a Unix account name (or \"\": the node's --trial-user)");
      if (!v.get<std::string>().empty())
        if (auto ok = check_account_name(v.get<std::string>()); !ok) return ok;
      l.account = v.get<std::string>();
    } else if (key != "name" && key != "created" && key != "token") {
      return bad("unknown user setting \"" + key + "\" (the settings are gpus, cpus, max_trials, priority, weight, account)");
    }
  }
  return l;
}

user_store::~user_store() {
  if (db_) sqlite3_close(db_);
}

status user_store::fail(const std::string& what) const {
  return {errc::inconsistent, what + ": " + (db_ ? sqlite3_errmsg(db_) : "no database") + " (" + path_ + ")"};
}

expected<std::unique_ptr<user_store>> user_store::open(const std::string& path) {
  std::unique_ptr<user_store> s{new user_store};
  s->path_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return bad("the users file " + path + " is not a regular file; move it away");
    if ((st.st_mode & 077) != 0)
      return bad("the users file " + path + " can be read by other accounts, and it holds every user's token: chmod 600 it");
  } else {
    ::mkdir(folder_of(path).c_str(), 0700);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (fd < 0 && errno != EEXIST) return bad("cannot create the users file " + path + ": " + std::strerror(errno));
    if (fd >= 0) {
      ::fchmod(fd, 0600);
      ::close(fd);
    }
  }
  if (sqlite3_open_v2(path.c_str(), &s->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK)
    return s->fail("cannot open the users file");
  sqlite3_busy_timeout(s->db_, 5000);
  char* err = nullptr;
  if (sqlite3_exec(s->db_, schema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "?";
    sqlite3_free(err);
    return bad("the users file " + path + " is not a libtune users table (" + why + "); move it away to start a new one");
  }
  if (auto loaded = s->load(); !loaded) return loaded;
  return s;
}

status user_store::load() {
  users_.clear();
  by_hash_.clear();
  sqlite_statement q{db_, "SELECT name, token, settings, created FROM users ORDER BY name"};
  if (!q.ok()) return fail("cannot read the users");
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    std::string name = q.column_text(0);
    auto limits = limits_from_json(nlohmann::json::parse(q.column_text(2), nullptr, false));
    if (!limits) return bad("the users file " + path_ + ": user " + name + ": " + limits.error().message());
    user_record u{std::move(name), q.column_text(1), std::move(*limits), q.column_real(3)};
    by_hash_[std::hash<std::string_view>{}(u.token)].push_back(users_.size());
    users_.push_back(std::move(u));
  }
  return rc == SQLITE_DONE ? status::ok() : fail("cannot read the users");
}

status user_store::write(const user_record& u, bool insert) {
  sqlite_statement q{db_, insert ? "INSERT INTO users(name, token, settings, created) VALUES(?1, ?2, ?3, ?4)"
                                 : "UPDATE users SET token = ?2, settings = ?3 WHERE name = ?1"};
  if (!q.ok()) return fail("cannot write user " + u.name);
  q.text(1, u.name).text(2, u.token).text(3, json_text(settings_json(u.limits))).real(4, u.created);
  if (q.step() != SQLITE_DONE) return fail("cannot write user " + u.name);
  return load();
}

expected<user_record> user_store::add(const std::string& name, const user_limits& limits) {
  if (auto ok = check_user_name(name); !ok) return ok;
  if (find(name)) return status{errc::already_exists, "there is already a user " + name + " (tune user list)"};
  auto token = random_token();
  if (!token) return token.error();
  user_record u{name, *token, limits, wall_seconds()};
  if (auto ok = write(u, true); !ok) return ok;
  return *find(name);
}

expected<user_record> user_store::set(const std::string& name, const user_limits& limits) {
  const auto* u = find(name);
  if (!u) return status{errc::not_found, "no user " + name + " (tune user list)"};
  user_record changed = *u;
  changed.limits = limits;
  if (auto ok = write(changed, false); !ok) return ok;
  return *find(name);
}

expected<user_record> user_store::new_token(const std::string& name) {
  const auto* u = find(name);
  if (!u) return status{errc::not_found, "no user " + name + " (tune user list)"};
  auto token = random_token();
  if (!token) return token.error();
  user_record changed = *u;
  changed.token = *token;
  if (auto ok = write(changed, false); !ok) return ok;
  return *find(name);
}

status user_store::remove(const std::string& name) {
  if (!find(name)) return {errc::not_found, "no user " + name + " (tune user list)"};
  sqlite_statement q{db_, "DELETE FROM users WHERE name = ?1"};
  if (!q.ok()) return fail("cannot remove user " + name);
  q.text(1, name);
  if (q.step() != SQLITE_DONE) return fail("cannot remove user " + name);
  return load();
}

const user_record* user_store::find(std::string_view name) const {
  for (const auto& u : users_)
    if (u.name == name) return &u;
  return nullptr;
}

const user_record* user_store::by_token(std::string_view token) const {
  const user_record* found = nullptr;
  auto h = by_hash_.find(std::hash<std::string_view>{}(token));
  if (h == by_hash_.end()) return nullptr;
  for (size_t i : h->second)  // no early exit among them
    if (token_equal(token, users_[i].token)) found = &users_[i];
  return found;
}

std::string users_file_beside(const std::string& token_file) { return folder_of(token_file) + "/users.db"; }
std::string node_token_file_beside(const std::string& token_file) { return folder_of(token_file) + "/node-token"; }
std::string user_token_file_beside(const std::string& token_file, const std::string& user) {
  return folder_of(token_file) + "/users/" + user + ".token";
}

}  // namespace tune
