#ifndef TRAINSUP_DAEMON_STORE_SQLITE_H_
#define TRAINSUP_DAEMON_STORE_SQLITE_H_

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// What every table codec of the state store (daemon/state_store.h) shares:
// the connection, prepared statements, transactions, and how values are kept.
//
// Times are REAL unix seconds, NULL for absl::InfinitePast() and +inf for
// absl::InfiniteFuture(). uint64 values are stored bit for bit in SQLite's
// signed 64-bit INTEGER. A double that is NaN is stored as NULL (SQLite has
// no NaN) and read back as NaN.
namespace trainsup {
namespace store {

// The connection a codec works on, and the path every error names.
struct Db {
  sqlite3* handle;
  const std::string& path;
};

// The status for SQLite result code `rc` from `handle` (may be null) on the
// database at `path`; `doing` says what failed ("writing the journal").
absl::Status SqliteStatus(const std::string& path, sqlite3* handle, int rc,
                          absl::string_view doing);
inline absl::Status SqliteStatus(const Db& db, int rc, absl::string_view doing) {
  return SqliteStatus(db.path, db.handle, rc, doing);
}

// A time as unix seconds, rounded once to the nearest double (about 0.25us
// at today's dates). InfiniteFuture is +inf.
double TimeToUnixSeconds(absl::Time time);
// The inverse: an exact double (such as x.25) comes back exactly. Values
// beyond absl::Time's range (including +inf) become an infinite time.
absl::Time UnixSecondsToTime(double seconds);

// A list of seconds as text ("0.5 1.25"), and back; unreadable items are skipped.
std::string JoinSeconds(const std::vector<double>& values);
std::vector<double> SplitSeconds(absl::string_view text);

// A row count for SQLite's LIMIT, which takes a signed 64-bit count.
int64_t Limit(size_t max);

// One prepared statement, finalized on destruction. Parameters are numbered
// from 1 and columns from 0, as in SQLite. A failed prepare or bind is
// remembered and returned by the next Step(), so callers check one result
// code per row.
class Statement {
 public:
  Statement(const Db& db, absl::string_view sql);
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void BindText(int i, absl::string_view text);
  void BindInt(int i, int64_t value) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(stmt_, i, value);
  }
  void BindUint(int i, uint64_t value) { BindInt(i, static_cast<int64_t>(value)); }
  void BindBool(int i, bool value) { BindInt(i, value ? 1 : 0); }
  void BindDouble(int i, double value);
  void BindNull(int i) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_null(stmt_, i);
  }
  void BindTime(int i, absl::Time time);
  void BindRank(int i, std::optional<uint32_t> rank) {
    if (!rank.has_value()) return BindNull(i);
    BindInt(i, *rank);
  }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return rc_ != SQLITE_OK ? rc_ : sqlite3_step(stmt_); }

  // Runs a statement that returns no rows and readies it for new bindings.
  // `doing` names the work in the error.
  absl::Status Run(absl::string_view doing);

  bool IsNull(int c) { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
  int64_t Int(int c) { return sqlite3_column_int64(stmt_, c); }
  uint64_t Uint(int c) { return static_cast<uint64_t>(Int(c)); }
  bool Bool(int c) { return Int(c) != 0; }
  double Double(int c);  // NaN for NULL
  std::string Text(int c);
  absl::Time Time(int c);
  std::optional<uint32_t> Rank(int c);

 private:
  const Db db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;  // the first failure of prepare or bind
};

// Runs SQL that binds no values (pragmas, transaction control, DDL).
absl::Status Exec(const Db& db, const char* sql, absl::string_view doing);

// Steps `select` to its end, calling `read_row(select)` on each row.
template <typename ReadRow>
absl::Status ForEachRow(const Db& db, Statement& select, ReadRow read_row) {
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) read_row(select);
  return rc == SQLITE_DONE ? absl::OkStatus() : SqliteStatus(db, rc, "reading the state");
}

// Runs `sql` once for each of `rows`, bound by `bind(statement, row)`
// (nothing is prepared when there is no row).
template <typename Row, typename Bind>
absl::Status RunForEach(const Db& db, const char* sql, const std::vector<Row>& rows, Bind bind) {
  if (rows.empty()) return absl::OkStatus();
  Statement statement(db, sql);
  for (const Row& row : rows) {
    bind(statement, row);
    if (absl::Status s = statement.Run("writing the journal"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Runs `body` in a transaction started with `begin`: commits if it returns
// OK, rolls back otherwise.
template <typename Body>
absl::Status InTransaction(const Db& db, const char* begin, Body body) {
  absl::Status status = Exec(db, begin, "starting a transaction");
  if (!status.ok()) return status;
  status = body();
  if (status.ok()) status = Exec(db, "COMMIT", "committing");
  // Some errors (disk full, I/O) have already rolled the transaction back.
  if (!status.ok() && sqlite3_get_autocommit(db.handle) == 0) {
    sqlite3_exec(db.handle, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return status;
}

}  // namespace store
}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STORE_SQLITE_H_
