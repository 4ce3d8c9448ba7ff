#include "tune/tuner/store.hpp"

#include <sqlite3.h>

#include <chrono>
#include <filesystem>

#include "tune/core/clock.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/core/sqlite.hpp"

namespace tune {

namespace {

nlohmann::json parse_or_null(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

constexpr const char* schema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials(
  id TEXT PRIMARY KEY, config TEXT NOT NULL, state TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  info TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results(
  trial TEXT NOT NULL REFERENCES trials(id), iteration INTEGER NOT NULL, time REAL NOT NULL,
  metrics TEXT NOT NULL, PRIMARY KEY(trial, iteration));
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, trial TEXT NOT NULL, kind TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_trial ON events(trial, seq);
)sql";

}  // namespace


status experiment_store::fail(const std::string& what) const {
  return status{errc::inconsistent, what + ": " + (db_ ? sqlite3_errmsg(db_) : "no database") + " (" + database_path() + ")"};
}

status experiment_store::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err ? err : "?";
    sqlite3_free(err);
    return status{errc::inconsistent, why + " (" + database_path() + ")"};
  }
  return status::ok();
}

expected<std::unique_ptr<experiment_store>> experiment_store::open(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) return status{errc::invalid_argument, "no experiment directory given"};
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return status{errc::invalid_argument, dir + " exists and is not a directory: give another experiment directory"};
  fs::create_directories(dir, ec);
  if (ec) return status{errc::invalid_argument, "cannot create the experiment directory " + dir + ": " + ec.message()};
  std::unique_ptr<experiment_store> s{new experiment_store};
  s->dir_ = dir;
  auto path = s->database_path();
  if (sqlite3_open_v2(path.c_str(), &s->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK)
    return s->fail("cannot open the experiment database");
  sqlite3_busy_timeout(s->db_, 5000);
  // A file that is not a database (or a damaged one) fails here, with what to do.
  auto not_ours = [&](const status& why) {
    return status{errc::invalid_argument, path + " is not a usable libtune experiment database (" + why.message() +
                                              "): move it away or choose another experiment directory"};
  };
  for (auto sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"})
    if (auto st = s->exec(sql); !st) return not_ours(st);
  // An existing experiment is opened without writing (so it can be read while its
  // controller holds a batch open); a new one gets its tables.
  bool have_tables = false;
  {
    sqlite_statement q{s->db_, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'trials', 'results', 'events')"};
    if (!q.ok()) return not_ours(s->fail("cannot read the database's schema"));
    if (q.step() == SQLITE_ROW) have_tables = q.column_int(0) == 4;
  }
  if (!have_tables) {
    if (auto st = s->exec(std::string{"BEGIN IMMEDIATE;"} + schema + "COMMIT;"); !st) {
      (void)s->exec("ROLLBACK");
      return not_ours(st);
    }
  }
  auto version = s->meta("schema_version");
  if (!version) return not_ours(version.error());
  if (version->is_null()) {
    if (auto st = s->set_meta("schema_version", schema_version); !st) return st;
  } else if (!version->is_number_integer() || version->get<int>() != schema_version) {
    return status{errc::invalid_argument, path + " was written by a libtune with experiment schema " + json_text(*version) +
                                              "; this one reads schema " + std::to_string(schema_version) +
                                              ": use the same libtune version"};
  }
  return s;
}

experiment_store::~experiment_store() {
  if (db_ && batch_) (void)exec("COMMIT");  // what was written stays (each write left it consistent)
  if (db_) sqlite3_close_v2(db_);
}

std::string experiment_store::checkpoint_dir(const std::string& trial) const { return dir_ + "/checkpoints/" + trial; }

status experiment_store::set_meta(const std::string& key, const nlohmann::json& value) {
  sqlite_statement st{db_, "INSERT INTO meta(key, value) VALUES(?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value"};
  if (!st.ok() || st.text(1, key).text(2, json_text(value)).step() != SQLITE_DONE) return fail("cannot store " + key);
  return status::ok();
}

expected<nlohmann::json> experiment_store::meta(const std::string& key) const {
  sqlite_statement st{db_, "SELECT value FROM meta WHERE key = ?1"};
  if (!st.ok()) return fail("cannot read the experiment's settings");
  st.text(1, key);
  int rc = st.step();
  if (rc == SQLITE_DONE) return nlohmann::json(nullptr);
  if (rc != SQLITE_ROW) return fail("cannot read " + key);
  return parse_or_null(st.column_text(0));
}

status experiment_store::add_trial(const std::string& id, const nlohmann::json& config, std::string_view state) {
  auto s = parse_trial_state(state);
  if (!s) return status{errc::invalid_argument, "unknown trial state \"" + std::string{state} + "\""};
  return add_trial(id, config, *s);
}

status experiment_store::update_trial(const std::string& id, std::string_view state, const std::string& error,
                                      const nlohmann::json& info) {
  auto s = parse_trial_state(state);
  if (!s) return status{errc::invalid_argument, "unknown trial state \"" + std::string{state} + "\""};
  return update_trial(id, *s, error, info);
}

status experiment_store::add_trial(const std::string& id, const nlohmann::json& config, trial_state state) {
  if (id.empty()) return status{errc::invalid_argument, "a trial needs an id"};
  sqlite_statement st{db_, "INSERT INTO trials(id, config, state, created, updated) VALUES(?1, ?2, ?3, ?4, ?4)"};
  if (!st.ok()) return fail("cannot add trial " + id);
  double t = wall_seconds();
  int rc = st.text(1, id).text(2, json_text(config)).text(3, std::string{to_string(state)}).real(4, t).step();
  if (rc == SQLITE_CONSTRAINT) return status{errc::already_exists, "trial " + id + " is already in the experiment"};
  if (rc != SQLITE_DONE) return fail("cannot add trial " + id);
  return status::ok();
}

status experiment_store::update_trial(const std::string& id, trial_state state, const std::string& error,
                                      const nlohmann::json& info) {
  if (!info.is_object()) return status{errc::invalid_argument, "a trial's info must be a JSON object"};
  auto current = trial(id);
  if (!current) return current.error();
  auto merged = current->info;
  merged.update(info);
  sqlite_statement st{db_, "UPDATE trials SET state = ?2, error = ?3, info = ?4, updated = ?5 WHERE id = ?1"};
  if (!st.ok() || st.text(1, id).text(2, std::string{to_string(state)}).text(3, shown_utf8(error)).text(4, json_text(merged)).real(5, wall_seconds()).step() != SQLITE_DONE)
    return fail("cannot update trial " + id);
  return status::ok();
}

status experiment_store::begin_batch() {
  if (batch_) return status{errc::inconsistent, "a batch of writes is already open"};
  if (auto st = exec("BEGIN IMMEDIATE"); !st) return st;
  batch_ = true;
  return status::ok();
}

status experiment_store::end_batch() {
  if (!batch_) return status{errc::inconsistent, "no batch of writes is open"};
  batch_ = false;
  if (auto st = exec("COMMIT"); !st) {
    (void)exec("ROLLBACK");
    return st;
  }
  return status::ok();
}

expected<size_t> experiment_store::add_results(const std::vector<result_row>& rows) {
  std::vector<encoded_result> encoded;
  encoded.reserve(rows.size());
  for (auto& r : rows) encoded.push_back({r.trial, r.iteration, r.time, json_text(r.metrics)});
  return add_results(encoded);
}

expected<size_t> experiment_store::add_results(const std::vector<encoded_result>& rows) {
  if (rows.empty()) return size_t{0};
  // All or none: its own transaction, or a savepoint inside an open batch.
  const char* open = batch_ ? "SAVEPOINT results" : "BEGIN IMMEDIATE";
  const char* undo = batch_ ? "ROLLBACK TO results; RELEASE results" : "ROLLBACK";
  const char* done = batch_ ? "RELEASE results" : "COMMIT";
  if (auto st = exec(open); !st) return st;
  sqlite_statement ins{db_, "INSERT INTO results(trial, iteration, time, metrics) VALUES(?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING"};
  if (!ins.ok()) {
    auto why = fail("cannot store results");
    (void)exec(undo);
    return why;
  }
  size_t added = 0;
  for (auto& r : rows) {
    int rc = ins.text(1, r.trial).integer(2, r.iteration).real(3, r.time).text(4, r.metrics).step();
    if (rc != SQLITE_DONE) {
      auto why = rc == SQLITE_CONSTRAINT ? status{errc::not_found, "a result of trial " + r.trial +
                                                                       ", which is not in the experiment: nothing stored"}
                                         : fail("cannot store a result of trial " + r.trial);
      ins.reset();
      (void)exec(undo);
      return why;
    }
    added += static_cast<size_t>(sqlite3_changes(db_));
    ins.reset();
  }
  if (auto st = exec(done); !st) {
    (void)exec(undo);
    return st;
  }
  return added;
}

status experiment_store::add_event(const std::string& trial, const std::string& kind, const nlohmann::json& body) {
  sqlite_statement st{db_, "INSERT INTO events(time, trial, kind, body) VALUES(?1, ?2, ?3, ?4)"};
  if (!st.ok() || st.real(1, wall_seconds()).text(2, trial).text(3, kind).text(4, json_text(body)).step() != SQLITE_DONE)
    return fail("cannot store an event");
  return status::ok();
}

namespace {
// A trial's row; a state the store should never hold (written by something else) is
// an error naming it.
expected<trial_row> read_trial(const sqlite_statement& st) {
  auto state = st.column_text(2);
  auto s = parse_trial_state(state);
  if (!s) return status{errc::inconsistent, "trial " + st.column_text(0) + " has an unknown state \"" + state + "\" in the store"};
  return trial_row{st.column_text(0),           parse_or_null(st.column_text(1)), *s, st.column_text(3),
                   parse_or_null(st.column_text(4)), st.column_real(5),            st.column_real(6)};
}
}  // namespace

expected<std::vector<trial_row>> experiment_store::trials() const {
  sqlite_statement st{db_, "SELECT id, config, state, error, info, created, updated FROM trials ORDER BY created, id"};
  if (!st.ok()) return fail("cannot read trials");
  std::vector<trial_row> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    auto row = read_trial(st);
    if (!row) return row.error();
    out.push_back(std::move(*row));
  }
  if (rc != SQLITE_DONE) return fail("cannot read trials");
  return out;
}

expected<trial_row> experiment_store::trial(const std::string& id) const {
  sqlite_statement st{db_, "SELECT id, config, state, error, info, created, updated FROM trials WHERE id = ?1"};
  if (!st.ok()) return fail("cannot read trial " + id);
  st.text(1, id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return status{errc::not_found, "no trial " + id + " in the experiment"};
  if (rc != SQLITE_ROW) return fail("cannot read trial " + id);
  return read_trial(st);
}

status experiment_store::for_each_result(const std::function<void(const result_row&)>& f, const std::string& trial) const {
  sqlite_statement st{db_, trial.empty() ? "SELECT trial, iteration, time, metrics FROM results ORDER BY trial, iteration"
                                  : "SELECT trial, iteration, time, metrics FROM results WHERE trial = ?1 ORDER BY iteration"};
  if (!st.ok()) return fail("cannot read results");
  if (!trial.empty()) st.text(1, trial);
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    f(result_row{st.column_text(0), st.column_int(1), st.column_real(2), parse_or_null(st.column_text(3))});
  if (rc != SQLITE_DONE) return fail("cannot read results");
  return status::ok();
}

expected<std::vector<result_row>> experiment_store::results(const std::string& trial) const {
  std::vector<result_row> out;
  if (auto s = for_each_result([&](const result_row& r) { out.push_back(r); }, trial); !s) return s;
  return out;
}

expected<std::vector<event_row>> experiment_store::events(const std::string& trial) const {
  sqlite_statement st{db_, trial.empty() ? "SELECT seq, time, trial, kind, body FROM events ORDER BY seq"
                                  : "SELECT seq, time, trial, kind, body FROM events WHERE trial = ?1 ORDER BY seq"};
  if (!st.ok()) return fail("cannot read events");
  if (!trial.empty()) st.text(1, trial);
  std::vector<event_row> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    out.push_back({st.column_int(0), st.column_real(1), st.column_text(2), st.column_text(3),
                   parse_or_null(st.column_text(4))});
  if (rc != SQLITE_DONE) return fail("cannot read events");
  return out;
}

expected<int64_t> experiment_store::result_count() const {
  sqlite_statement st{db_, "SELECT count(*) FROM results"};
  if (!st.ok() || st.step() != SQLITE_ROW) return fail("cannot count results");
  return st.column_int(0);
}

}  // namespace tune
