// A prepared SQLite sqlite_statement, finalized on scope exit (the experiment store and the
// head's user table). Header-only: whoever includes it links SQLite.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

namespace tune {

// A prepared statement, finalized on scope exit.
class sqlite_statement {
 public:
  sqlite_statement(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~sqlite_statement() { sqlite3_finalize(s_); }
  sqlite_statement(const sqlite_statement&) = delete;
  sqlite_statement& operator=(const sqlite_statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite_statement& text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  sqlite_statement& integer(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  sqlite_statement& real(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(s_); }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string column_text(int i) const {
    auto* p = sqlite3_column_text(s_, i);
    return p ? std::string{reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, i))} : "";
  }
  int64_t column_int(int i) const { return sqlite3_column_int64(s_, i); }
  double column_real(int i) const { return sqlite3_column_double(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

}  // namespace tune
