// The cluster's users (docs/users.md). One head, many people: each user has a token of
// their own and settings — quotas (GPUs counted exactly as whole cards and shares,
// CPUs, concurrent trials), a priority, a fair-share weight, and the Unix account their
// trials run as. The table lives in a small SQLite file beside the head's token
// (users.db, mode 0600), so users outlive a head restart.
//
// Who a token is: the head's own token is the admin (manages users and nodes, sees
// everything); the node token (node-token beside it) lets nodes join and nothing else;
// a user's token acts as that user; any other token is nobody.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "tune/core/quantity.hpp"
#include "tune/core/status.hpp"

struct sqlite3;

namespace tune {

struct user_limits {
  std::optional<quantity> gpus;        // GPUs held at once (none: no quota)
  std::optional<quantity> cpus;        // CPUs held at once
  std::optional<int64_t> max_trials;   // trials running at once
  int64_t priority = 0;                // higher preempts lower
  double weight = 1;                   // fair share: GPUs in proportion to the weights
  std::string account;                 // Unix account of the user's trials (empty: the node's --trial-user)
  bool operator==(const user_limits&) const = default;
};

struct user_record {
  std::string name;
  std::string token;
  user_limits limits;
  double created = 0;  // wall clock, s
};

enum class role { nobody, admin, node, user };

// Who sent a request. `name` is the user's name ("admin" for the admin token).
struct principal {
  role kind = role::nobody;
  std::string name;
  bool can_act() const { return kind == role::admin || kind == role::user; }
};

// A user's name: 1 to 32 of [a-z0-9_-], starting with a letter; not "admin" or "node".
status check_user_name(std::string_view name);
// A Unix account name as useradd takes them: [a-z_][a-z0-9_-]*[$]?, at most 32.
status check_account_name(std::string_view name);

// {"name", "gpus", "cpus", "max_trials", "priority", "weight", "account", "created"}
// (quotas null when none); with the token when `with_token`.
nlohmann::json to_json(const user_record& u, bool with_token);
// Settings from {"gpus": 4, "cpus": 16, "max_trials": 8, "priority": 10, "weight": 2,
// "account": "ann"} (each optional: `base`'s value stays; null clears a quota). Errors
// name the field and what it must be.
expected<user_limits> limits_from_json(const nlohmann::json& j, user_limits base = {});

class user_store {
 public:
  // Opens (creating when missing, mode 0600) the users file. A file that is not a user
  // table, or one that others can read, is an error saying what to do.
  static expected<std::unique_ptr<user_store>> open(const std::string& path);
  ~user_store();
  user_store(const user_store&) = delete;
  user_store& operator=(const user_store&) = delete;

  // A new user with a new token. Refused when the name is taken or not a valid name.
  expected<user_record> add(const std::string& name, const user_limits& limits);
  // Changes a user's settings (the token stays).
  expected<user_record> set(const std::string& name, const user_limits& limits);
  // A new token for the user; the old one stops working at once.
  expected<user_record> new_token(const std::string& name);
  status remove(const std::string& name);

  // Sorted by name.
  const std::vector<user_record>& users() const { return users_; }
  const user_record* find(std::string_view name) const;
  // The user whose token this is: every comparison in constant time.
  const user_record* by_token(std::string_view token) const;
  const std::string& path() const { return path_; }

 private:
  user_store() = default;
  status load();
  status write(const user_record& u, bool insert);
  status fail(const std::string& what) const;

  sqlite3* db_ = nullptr;
  std::string path_;
  std::vector<user_record> users_;
  // Users by their token's hash: a request compares its token (in constant time) with the
  // few whose hash matches, not with everyone's.
  std::unordered_map<size_t, std::vector<size_t>> by_hash_;
};

// The users file beside a token file: "/root/.tune/token" -> "/root/.tune/users.db".
std::string users_file_beside(const std::string& token_file);
// The node token beside it: "/root/.tune/node-token".
std::string node_token_file_beside(const std::string& token_file);
// Where `tune user add` puts a user's token: "/root/.tune/users/ann.token".
std::string user_token_file_beside(const std::string& token_file, const std::string& user);

}  // namespace tune
