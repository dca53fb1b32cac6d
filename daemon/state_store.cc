#include "daemon/state_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "daemon/core/event_log.h"

namespace trainsup {
namespace {

// Tables added by schema version 3 (a new store creates them, and so does
// the migration from version 2).
constexpr const char* kCreateJobMeasures =
    "CREATE TABLE job_measures ("
    "  job TEXT PRIMARY KEY NOT NULL, ledger_start REAL, ledger_last REAL,"
    "  ledger_generation INTEGER NOT NULL, ledger_high_water INTEGER NOT NULL,"
    "  checkpoint_costs TEXT NOT NULL, checkpoint_async TEXT NOT NULL,"
    "  restart_costs TEXT NOT NULL)";
constexpr const char* kCreateLedgerGenerations =
    "CREATE TABLE ledger_generations ("
    "  job TEXT NOT NULL, generation INTEGER NOT NULL, useful REAL NOT NULL,"
    "  starved REAL NOT NULL, checkpoint_blocked REAL NOT NULL, lost REAL NOT NULL,"
    "  PRIMARY KEY (job, generation)) WITHOUT ROWID";
constexpr const char* kCreateStacks =
    "CREATE TABLE stacks ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, generation INTEGER NOT NULL,"
    "  event_id INTEGER NOT NULL, time REAL, collect_seconds REAL NOT NULL, culprit INTEGER,"
    "  rank INTEGER NOT NULL, node TEXT NOT NULL, answered INTEGER NOT NULL,"
    "  text TEXT NOT NULL)";

// Added by schema version 4: fences decided and not yet seen to succeed.
constexpr const char* kCreatePendingFences =
    "CREATE TABLE pending_fences ("
    "  node TEXT PRIMARY KEY NOT NULL, reason TEXT NOT NULL, decided REAL)";
// Added by schema version 5: a pending row may be an unfence ("unfence").
constexpr const char* kAddFenceAction =
    "ALTER TABLE pending_fences ADD COLUMN action TEXT NOT NULL DEFAULT 'fence'";

// The newest schema (StateStore::kSchemaVersion). Times are REAL unix
// seconds, NULL for absl::InfinitePast() and +inf for absl::InfiniteFuture().
// uint64 values are stored bit for bit in SQLite's signed 64-bit INTEGER.
// Failures and restarts keep the order they were applied in `seq`. A figure
// value is NULL for NaN (SQLite has no NaN).
constexpr const char* kCreateSchema[] = {
    "CREATE TABLE meta ("
    "  key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)",
    "CREATE TABLE nodes ("
    "  name TEXT PRIMARY KEY NOT NULL, quarantined INTEGER NOT NULL,"
    "  reason TEXT NOT NULL, changed REAL, changed_by TEXT NOT NULL)",
    "CREATE TABLE failures ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL, job TEXT NOT NULL,"
    "  generation INTEGER NOT NULL, kind TEXT NOT NULL, node TEXT NOT NULL,"
    "  rank INTEGER, message TEXT NOT NULL, charged INTEGER NOT NULL DEFAULT 1)",
    "CREATE TABLE restarts ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL, job TEXT NOT NULL,"
    "  from_generation INTEGER NOT NULL, to_generation INTEGER NOT NULL,"
    "  reason TEXT NOT NULL)",
    "CREATE TABLE jobs ("
    "  job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
    "  state TEXT NOT NULL, reason TEXT NOT NULL, world_size INTEGER NOT NULL,"
    "  changed REAL, exposure_seconds REAL NOT NULL DEFAULT 0,"
    "  restarts_forgiven_before REAL)",
    "CREATE TABLE events ("
    "  id INTEGER PRIMARY KEY, time REAL, kind TEXT NOT NULL, job TEXT NOT NULL,"
    "  generation INTEGER NOT NULL, rank INTEGER, node TEXT NOT NULL,"
    "  message TEXT NOT NULL)",
    "CREATE TABLE event_figures ("
    "  event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,"
    "  position INTEGER NOT NULL, name TEXT NOT NULL, value REAL,"
    "  PRIMARY KEY (event_id, position)) WITHOUT ROWID",
    kCreateJobMeasures,

    kCreateLedgerGenerations,

    kCreateStacks,

    kCreatePendingFences,
    kAddFenceAction,
};

// How an older schema becomes the next one: kMigrations[i] takes version
// i + 1 to i + 2. Each runs in the transaction that opens the store, so a
// migration is all or nothing.
struct Migration {
  std::vector<const char*> statements;
};
const std::vector<Migration>& Migrations() {
  static const auto* const kMigrations = new std::vector<Migration>{
      // 1 -> 2: an operator's resume is kept with its job.
      {{"ALTER TABLE jobs ADD COLUMN restarts_forgiven_before REAL"}},
      // 2 -> 3: whether a failure counts toward its node's quarantine (all
      // did before); what jobs measured (ledger, C, R); hung jobs' stacks.
      {{"ALTER TABLE failures ADD COLUMN charged INTEGER NOT NULL DEFAULT 1", kCreateJobMeasures,
        kCreateLedgerGenerations, kCreateStacks}},
      // 3 -> 4: fences are journaled as pending before they run.
      {{kCreatePendingFences}},
      // 4 -> 5: an operator's unquarantine is journaled as a pending unfence.
      {{kAddFenceAction}},
  };
  return *kMigrations;
}

constexpr int kBusyTimeoutMs = 1000;
// A list of seconds as text ("0.5 1.25"), and back; unreadable items are skipped.
std::string JoinSeconds(const std::vector<double>& values) {
  std::string out;
  for (double v : values) absl::StrAppend(&out, out.empty() ? "" : " ", absl::StrFormat("%.17g", v));
  return out;
}
std::vector<double> SplitSeconds(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    double v = 0;
    if (absl::SimpleAtod(item, &v) && std::isfinite(v)) out.push_back(v);
  }
  return out;
}

// The most recent stack rows loaded at start-up (a few hung generations of
// the biggest jobs; older ones stay on disk).
constexpr size_t kRestoredStackRows = 8192;

// The status for SQLite result code `rc` from `db` (may be null) on the
// database at `path`; `doing` says what failed ("writing the journal").
absl::Status SqliteStatus(const std::string& path, sqlite3* db, int rc, absl::string_view doing) {
  const std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
      return absl::UnavailableError(
          absl::StrCat("state database ", path,
                       " is locked by another process (is another trainsupd running on it?)"));
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::DataLossError(absl::StrCat("state database ", path,
                                              " is corrupt or not a trainsup database: ", message));
    case SQLITE_CONSTRAINT:
      return absl::InvalidArgumentError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PERM:
    case SQLITE_READONLY: {
      const int error_number = db != nullptr ? sqlite3_system_errno(db) : 0;
      const std::string text =
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message);
      if (error_number != 0) return absl::ErrnoToStatus(error_number, text);
      return absl::UnavailableError(text);
    }
    default:
      return absl::InternalError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
  }
}

// A time as unix seconds, rounded once to the nearest double (about 0.25us
// at today's dates): whole and fractional seconds are converted apart, as
// absl::ToDoubleSeconds(t - absl::UnixEpoch()) rounds the count of
// quarter-nanoseconds (to 256ns) before dividing. InfiniteFuture is +inf.
double TimeToUnixSeconds(absl::Time time) {
  if (time == absl::InfiniteFuture()) return std::numeric_limits<double>::infinity();
  const int64_t whole = absl::ToUnixSeconds(time);  // rounds down
  return static_cast<double>(whole) + absl::ToDoubleSeconds(time - absl::FromUnixSeconds(whole));
}

// The inverse: an exact double (such as x.25) comes back exactly. Values
// beyond absl::Time's range (including +inf) become an infinite time.
absl::Time UnixSecondsToTime(double seconds) {
  if (!(std::fabs(seconds) < 1e15)) {
    return seconds > 0 ? absl::InfiniteFuture() : absl::InfinitePast();
  }
  const double whole = std::floor(seconds);
  return absl::FromUnixSeconds(static_cast<int64_t>(whole)) + absl::Seconds(seconds - whole);
}

// One prepared statement, finalized on destruction. Parameters are numbered
// from 1 and columns from 0, as in SQLite. A failed prepare or bind is
// remembered and returned by the next Step(), so callers check one result
// code per row.
class Statement {
 public:
  Statement(sqlite3* db, absl::string_view sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  sqlite3* db() const { return db_; }

  void BindText(int i, absl::string_view text) {
    if (rc_ != SQLITE_OK) return;
    if (text.size() > static_cast<size_t>(INT_MAX)) {
      rc_ = SQLITE_TOOBIG;
      return;
    }
    // A null data pointer would bind NULL, not "".
    rc_ = sqlite3_bind_text(stmt_, i, text.empty() ? "" : text.data(),
                            static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void BindInt(int i, int64_t value) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(stmt_, i, value);
  }
  void BindUint(int i, uint64_t value) { BindInt(i, static_cast<int64_t>(value)); }
  void BindDouble(int i, double value) {
    if (std::isnan(value)) return BindNull(i);  // what SQLite would store anyway
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_double(stmt_, i, value);
  }
  void BindNull(int i) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_null(stmt_, i);
  }
  void BindTime(int i, absl::Time time) {
    if (time == absl::InfinitePast()) return BindNull(i);
    BindDouble(i, TimeToUnixSeconds(time));
  }
  void BindRank(int i, std::optional<uint32_t> rank) {
    if (!rank.has_value()) return BindNull(i);
    BindInt(i, *rank);
  }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return rc_ != SQLITE_OK ? rc_ : sqlite3_step(stmt_); }

  // Runs a statement that returns no rows and readies it for new bindings.
  // SQLITE_OK or an error code (sqlite3_errmsg(db()) tells more).
  int Run() {
    const int rc = Step();
    if (rc != SQLITE_DONE) return rc == SQLITE_ROW ? SQLITE_MISUSE : rc;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return SQLITE_OK;
  }

  bool IsNull(int c) { return sqlite3_column_type(stmt_, c) == SQLITE_NULL; }
  int64_t Int(int c) { return sqlite3_column_int64(stmt_, c); }
  uint64_t Uint(int c) { return static_cast<uint64_t>(Int(c)); }
  double Double(int c) {
    return IsNull(c) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(stmt_, c);
  }
  std::string Text(int c) {
    const unsigned char* text = sqlite3_column_text(stmt_, c);
    if (text == nullptr) return "";
    return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, c));
  }
  absl::Time Time(int c) {
    if (IsNull(c)) return absl::InfinitePast();
    return UnixSecondsToTime(sqlite3_column_double(stmt_, c));
  }
  std::optional<uint32_t> Rank(int c) {
    if (IsNull(c)) return std::nullopt;
    return static_cast<uint32_t>(Int(c));
  }

 private:
  sqlite3* const db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;  // the first failure of prepare or bind
};

// Runs SQL that binds no values (pragmas, transaction control, DDL).
absl::Status Exec(sqlite3* db, const std::string& path, const char* sql, absl::string_view doing) {
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : SqliteStatus(path, db, rc, doing);
}

// Steps `select` to its end, calling `read_row(select)` on each row.
template <typename ReadRow>
absl::Status ForEachRow(Statement& select, const std::string& path, ReadRow read_row) {
  int rc;
  while ((rc = select.Step()) == SQLITE_ROW) read_row(select);
  return rc == SQLITE_DONE ? absl::OkStatus()
                           : SqliteStatus(path, select.db(), rc, "reading the state");
}

// Runs `body` in a transaction started with `begin`: commits if it returns
// OK, rolls back otherwise.
template <typename Body>
absl::Status InTransaction(sqlite3* db, const std::string& path, const char* begin, Body body) {
  absl::Status status = Exec(db, path, begin, "starting a transaction");
  if (!status.ok()) return status;
  status = body();
  if (status.ok()) status = Exec(db, path, "COMMIT", "committing");
  // Some errors (disk full, I/O) have already rolled the transaction back.
  if (!status.ok() && sqlite3_get_autocommit(db) == 0) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return status;
}

// Checks that the database is empty (sets `*empty`) or a trainsup database
// of a schema version this build reads (sets `*version`; older ones are
// migrated). Reads only.
absl::Status CheckSchema(sqlite3* db, const std::string& path, bool* empty, int* version_out) {
  std::vector<std::string> tables;
  Statement list(db,
                 "SELECT name FROM sqlite_master WHERE type = 'table'"
                 " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name");
  absl::Status status =
      ForEachRow(list, path, [&](Statement& row) { tables.push_back(row.Text(0)); });
  if (!status.ok()) return status;
  *empty = tables.empty();
  if (*empty) return absl::OkStatus();

  if (std::find(tables.begin(), tables.end(), "meta") == tables.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", path, " is not a trainsup database: it has tables (",
                     absl::StrJoin(tables, ", "), ") but no meta table"));
  }
  std::optional<std::string> version;
  Statement select(db, "SELECT value FROM meta WHERE key = 'schema_version'");
  status = ForEachRow(select, path, [&](Statement& row) { version = row.Text(0); });
  if (!status.ok()) return status;
  if (!version.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", path,
                     " is not a trainsup database: its meta table has no schema_version"));
  }
  int number = 0;
  if (!absl::SimpleAtoi(*version, &number) || number < 1 || number > StateStore::kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state database ", path, " has schema version ", *version,
        " but this trainsupd reads schema versions 1 to ", StateStore::kSchemaVersion,
        "; run a matching trainsupd, or move the file away to start with an empty state"));
  }
  *version_out = number;
  return absl::OkStatus();
}

// Makes `db` the only connection to its file for as long as it is open, and
// checks and prepares the database. Reads before it writes, so that a file
// that is locked, not a database or corrupt is refused unmodified.
absl::Status Initialize(sqlite3* db, const std::string& path) {
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (sqlite3_db_readonly(db, "main") == 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "state database ", path, " can only be opened read-only; check its permissions"));
  }
  // From here on, the lock taken by the first read (shared) and the first
  // write (exclusive) is kept until the connection is closed.
  absl::Status status =
      Exec(db, path, "PRAGMA locking_mode = EXCLUSIVE", "setting the locking mode");
  if (!status.ok()) return status;
  // The first read: fails on a file that is locked or is not a database.
  status = Exec(db, path, "SELECT count(*) FROM sqlite_master", "reading the schema");
  if (!status.ok()) return status;

  std::vector<std::string> problems;
  Statement check(db, "PRAGMA quick_check");
  status = ForEachRow(check, path, [&](Statement& row) {
    std::string line = row.Text(0);
    if (line != "ok" && problems.size() < 5) problems.push_back(std::move(line));
  });
  if (!status.ok()) return status;
  if (!problems.empty()) {
    return absl::DataLossError(absl::StrCat(
        "state database ", path,
        " is corrupt or not a trainsup database: quick_check: ", absl::StrJoin(problems, "; ")));
  }

  bool empty = false;
  int version = 0;
  status = CheckSchema(db, path, &empty, &version);
  if (!status.ok()) return status;

  // Switched only once the file passed the checks above. With the exclusive
  // locking mode already set, the WAL index lives in heap memory (no -shm
  // file) and no other connection can share the file.
  std::string journal_mode;
  Statement wal(db, "PRAGMA journal_mode = WAL");
  status = ForEachRow(wal, path, [&](Statement& row) { journal_mode = row.Text(0); });
  if (!status.ok()) return status;
  if (journal_mode != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", path, " cannot use WAL journal mode (it is in \"",
                     journal_mode, "\" mode); it must be a file on a local file system"));
  }
  // WAL with synchronous=NORMAL: a committed transaction survives a crash of
  // the process; only a power loss can lose the last few.
  status = Exec(db, path, "PRAGMA synchronous = NORMAL", "setting synchronous mode");
  if (!status.ok()) return status;
  status = Exec(db, path, "PRAGMA foreign_keys = ON", "enabling foreign keys");
  if (!status.ok()) return status;

  return InTransaction(db, path, "BEGIN IMMEDIATE", [&]() -> absl::Status {
    if (empty) {
      for (const char* sql : kCreateSchema) {
        absl::Status created = Exec(db, path, sql, "creating the schema");
        if (!created.ok()) return created;
      }
      Statement insert(db, "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)");
      insert.BindInt(1, StateStore::kSchemaVersion);
      if (const int rc = insert.Run(); rc != SQLITE_OK) {
        return SqliteStatus(path, db, rc, "creating the schema");
      }
    }
    for (; !empty && version < StateStore::kSchemaVersion; ++version) {
      const std::string doing = absl::StrCat("migrating schema version ", version, " to ", version + 1);
      for (const char* sql : Migrations()[version - 1].statements) {
        absl::Status migrated = Exec(db, path, sql, doing);
        if (!migrated.ok()) return migrated;
      }
      Statement bump(db, "UPDATE meta SET value = ?1 WHERE key = 'schema_version'");
      bump.BindInt(1, version + 1);
      if (const int rc = bump.Run(); rc != SQLITE_OK) return SqliteStatus(path, db, rc, doing);
      TRAINSUP_LOG_INFO("state database %s: schema version %d migrated to %d", path, version,
                        version + 1);
    }
    // A write, so that the exclusive lock is surely taken now and not at
    // the first Apply(): a second trainsupd on this file fails at start-up.
    Statement touch(db, "UPDATE meta SET value = value WHERE key = 'schema_version'");
    const int rc = touch.Run();
    return rc == SQLITE_OK ? absl::OkStatus() : SqliteStatus(path, db, rc, "locking");
  });
}

absl::Status WriteJournal(sqlite3* db, const std::string& path, const Journal& journal) {
  auto error = [&](int rc) { return SqliteStatus(path, db, rc, "writing the journal"); };
  if (!journal.nodes.empty()) {
    Statement upsert(db,
                     "INSERT OR REPLACE INTO nodes (name, quarantined, reason, changed, changed_by)"
                     " VALUES (?1, ?2, ?3, ?4, ?5)");
    for (const NodeRecordRow& row : journal.nodes) {
      upsert.BindText(1, row.name);
      upsert.BindInt(2, row.quarantined ? 1 : 0);
      upsert.BindText(3, row.reason);
      upsert.BindTime(4, row.changed);
      upsert.BindText(5, row.changed_by);
      if (const int rc = upsert.Run(); rc != SQLITE_OK) return error(rc);
    }
  }
  if (!journal.failures.empty()) {
    Statement insert(db,
                     "INSERT INTO failures (time, job, generation, kind, node, rank, message,"
                     " charged) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (const FailureRow& row : journal.failures) {
      insert.BindTime(1, row.time);
      insert.BindText(2, row.job);
      insert.BindUint(3, row.generation);
      insert.BindText(4, row.kind);
      insert.BindText(5, row.node);
      insert.BindRank(6, row.rank);
      insert.BindText(7, row.message);
      insert.BindInt(8, row.charged ? 1 : 0);
      if (const int rc = insert.Run(); rc != SQLITE_OK) return error(rc);
    }
  }
  if (!journal.restarts.empty()) {
    Statement insert(db,
                     "INSERT INTO restarts (time, job, from_generation, to_generation, reason)"
                     " VALUES (?1, ?2, ?3, ?4, ?5)");
    for (const RestartRow& row : journal.restarts) {
      insert.BindTime(1, row.time);
      insert.BindText(2, row.job);
      insert.BindUint(3, row.from_generation);
      insert.BindUint(4, row.to_generation);
      insert.BindText(5, row.reason);
      if (const int rc = insert.Run(); rc != SQLITE_OK) return error(rc);
    }
  }
  if (!journal.jobs.empty()) {
    Statement upsert(
        db,
        "INSERT OR REPLACE INTO jobs (job, generation, state, reason, world_size, changed,"
        " exposure_seconds, restarts_forgiven_before) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (const JobRow& row : journal.jobs) {
      upsert.BindText(1, row.job);
      upsert.BindUint(2, row.generation);
      upsert.BindText(3, row.state);
      upsert.BindText(4, row.reason);
      upsert.BindInt(5, row.world_size);
      upsert.BindTime(6, row.changed);
      upsert.BindDouble(7, row.exposure_seconds);
      upsert.BindTime(8, row.restarts_forgiven_before);
      if (const int rc = upsert.Run(); rc != SQLITE_OK) return error(rc);
    }
  }
  if (!journal.measures.empty()) {
    Statement upsert(db,
                     "INSERT OR REPLACE INTO job_measures (job, ledger_start, ledger_last,"
                     " ledger_generation, ledger_high_water, checkpoint_costs, checkpoint_async,"
                     " restart_costs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    Statement generation(db,
                         "INSERT OR REPLACE INTO ledger_generations (job, generation, useful,"
                         " starved, checkpoint_blocked, lost) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (const JobMeasuresRow& row : journal.measures) {
      upsert.BindText(1, row.job);
      upsert.BindTime(2, row.ledger.start);
      upsert.BindTime(3, row.ledger.last);
      upsert.BindUint(4, row.ledger.generation);
      upsert.BindInt(5, row.ledger.high_water_step);
      upsert.BindText(6, JoinSeconds(row.checkpoint_costs));
      upsert.BindText(7, JoinSeconds(row.checkpoint_async));
      upsert.BindText(8, JoinSeconds(row.restart_costs));
      if (const int rc = upsert.Run(); rc != SQLITE_OK) return error(rc);
      for (const auto& [gen, totals] : row.ledger.by_generation) {
        generation.BindText(1, row.job);
        generation.BindUint(2, gen);
        for (int b = 0; b < kBucketCount; ++b) generation.BindDouble(3 + b, totals.seconds[b]);
        if (const int rc = generation.Run(); rc != SQLITE_OK) return error(rc);
      }
    }
  }
  if (!journal.stacks.empty()) {
    Statement insert(db,
                     "INSERT INTO stacks (job, generation, event_id, time, collect_seconds,"
                     " culprit, rank, node, answered, text)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    for (const StackRow& row : journal.stacks) {
      insert.BindText(1, row.job);
      insert.BindUint(2, row.generation);
      insert.BindUint(3, row.event_id);
      insert.BindTime(4, row.time);
      insert.BindDouble(5, row.collect_seconds);
      insert.BindRank(6, row.culprit);
      insert.BindInt(7, row.rank);
      insert.BindText(8, row.node);
      insert.BindInt(9, row.answered ? 1 : 0);
      insert.BindText(10, row.text);
      if (const int rc = insert.Run(); rc != SQLITE_OK) return error(rc);
    }
  }
  if (!journal.fences.empty()) {
    Statement upsert(db,
                     "INSERT OR REPLACE INTO pending_fences (node, reason, decided, action)"
                     " VALUES (?1, ?2, ?3, ?4)");
    Statement clear(db, "DELETE FROM pending_fences WHERE node = ?1");
    for (const FenceRow& row : journal.fences) {
      if (row.pending) {
        upsert.BindText(1, row.node);
        upsert.BindText(2, row.reason);
        upsert.BindTime(3, row.decided);
        upsert.BindText(4, FenceActionName(row.action));
        if (const int rc = upsert.Run(); rc != SQLITE_OK) return error(rc);
      } else {
        clear.BindText(1, row.node);
        if (const int rc = clear.Run(); rc != SQLITE_OK) return error(rc);
      }
    }
  }
  if (!journal.events.empty()) {
    Statement insert(db,
                     "INSERT INTO events (id, time, kind, job, generation, rank, node, message)"
                     " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    Statement insert_figure(db,
                            "INSERT INTO event_figures (event_id, position, name, value)"
                            " VALUES (?1, ?2, ?3, ?4)");
    for (const Event& event : journal.events) {
      insert.BindUint(1, event.id);
      insert.BindTime(2, event.time);
      insert.BindText(3, EventKindName(event.kind));
      insert.BindText(4, event.job);
      insert.BindUint(5, event.generation);
      insert.BindRank(6, event.rank);
      insert.BindText(7, event.node);
      insert.BindText(8, event.message);
      if (const int rc = insert.Run(); rc != SQLITE_OK) return error(rc);
      for (size_t i = 0; i < event.figures.size(); ++i) {
        insert_figure.BindUint(1, event.id);
        insert_figure.BindUint(2, i);
        insert_figure.BindText(3, event.figures[i].first);
        insert_figure.BindDouble(4, event.figures[i].second);
        if (const int rc = insert_figure.Run(); rc != SQLITE_OK) return error(rc);
      }
    }
  }
  return absl::OkStatus();
}

// SQLite's LIMIT takes a signed 64-bit count.
int64_t Limit(size_t max) {
  return static_cast<int64_t>(std::min<uint64_t>(max, std::numeric_limits<int64_t>::max()));
}

absl::Status ReadState(sqlite3* db, const std::string& path, size_t max_events, size_t max_failures,
                       size_t max_restarts, PersistedState* state) {
  Statement nodes(db,
                  "SELECT name, quarantined, reason, changed, changed_by FROM nodes ORDER BY name");
  absl::Status status = ForEachRow(nodes, path, [&](Statement& row) {
    NodeRecordRow& node = state->nodes.emplace_back();
    node.name = row.Text(0);
    node.quarantined = row.Int(1) != 0;
    node.reason = row.Text(2);
    node.changed = row.Time(3);
    node.changed_by = row.Text(4);
  });
  if (!status.ok()) return status;

  Statement jobs(
      db,
      "SELECT job, generation, state, reason, world_size, changed, exposure_seconds,"
      " restarts_forgiven_before FROM jobs ORDER BY job");
  status = ForEachRow(jobs, path, [&](Statement& row) {
    JobRow& job = state->jobs.emplace_back();
    job.job = row.Text(0);
    job.generation = row.Uint(1);
    job.state = row.Text(2);
    job.reason = row.Text(3);
    job.world_size = static_cast<uint32_t>(row.Int(4));
    job.changed = row.Time(5);
    job.exposure_seconds = row.Double(6);
    job.restarts_forgiven_before = row.Time(7);
  });
  if (!status.ok()) return status;

  Statement failures(db,
                     "SELECT time, job, generation, kind, node, rank, message, charged FROM ("
                     "  SELECT * FROM failures ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  failures.BindInt(1, Limit(max_failures));
  status = ForEachRow(failures, path, [&](Statement& row) {
    FailureRow& failure = state->failures.emplace_back();
    failure.time = row.Time(0);
    failure.job = row.Text(1);
    failure.generation = row.Uint(2);
    failure.kind = row.Text(3);
    failure.node = row.Text(4);
    failure.rank = row.Rank(5);
    failure.message = row.Text(6);
    failure.charged = row.Int(7) != 0;
  });
  if (!status.ok()) return status;

  Statement restarts(db,
                     "SELECT time, job, from_generation, to_generation, reason FROM ("
                     "  SELECT * FROM restarts ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  restarts.BindInt(1, Limit(max_restarts));
  status = ForEachRow(restarts, path, [&](Statement& row) {
    RestartRow& restart = state->restarts.emplace_back();
    restart.time = row.Time(0);
    restart.job = row.Text(1);
    restart.from_generation = row.Uint(2);
    restart.to_generation = row.Uint(3);
    restart.reason = row.Text(4);
  });
  if (!status.ok()) return status;

  Statement measures(db,
                     "SELECT job, ledger_start, ledger_last, ledger_generation, ledger_high_water,"
                     " checkpoint_costs, checkpoint_async, restart_costs FROM job_measures"
                     " ORDER BY job");
  absl::flat_hash_map<std::string, size_t> measures_index;
  status = ForEachRow(measures, path, [&](Statement& row) {
    JobMeasuresRow& m = state->measures.emplace_back();
    m.job = row.Text(0);
    m.ledger.start = row.Time(1);
    m.ledger.last = row.Time(2);
    m.ledger.generation = row.Uint(3);
    m.ledger.high_water_step = row.Int(4);
    m.checkpoint_costs = SplitSeconds(row.Text(5));
    m.checkpoint_async = SplitSeconds(row.Text(6));
    m.restart_costs = SplitSeconds(row.Text(7));
    measures_index[m.job] = state->measures.size() - 1;
  });
  if (!status.ok()) return status;
  Statement generations(db,
                        "SELECT job, generation, useful, starved, checkpoint_blocked, lost"
                        " FROM ledger_generations ORDER BY job, generation");
  status = ForEachRow(generations, path, [&](Statement& row) {
    auto it = measures_index.find(row.Text(0));
    if (it == measures_index.end()) return;
    LedgerTotals& totals = state->measures[it->second].ledger.by_generation[row.Uint(1)];
    for (int b = 0; b < kBucketCount; ++b) {
      const double v = row.Double(2 + b);
      totals.seconds[b] = std::isfinite(v) && v > 0 ? v : 0;
    }
  });
  if (!status.ok()) return status;

  Statement stacks(db,
                   "SELECT job, generation, event_id, time, collect_seconds, culprit, rank, node,"
                   " answered, text FROM ("
                   "  SELECT * FROM stacks ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  stacks.BindInt(1, Limit(kRestoredStackRows));
  status = ForEachRow(stacks, path, [&](Statement& row) {
    StackRow& s = state->stacks.emplace_back();
    s.job = row.Text(0);
    s.generation = row.Uint(1);
    s.event_id = row.Uint(2);
    s.time = row.Time(3);
    s.collect_seconds = row.Double(4);
    s.culprit = row.Rank(5);
    s.rank = static_cast<uint32_t>(row.Int(6));
    s.node = row.Text(7);
    s.answered = row.Int(8) != 0;
    s.text = row.Text(9);
  });
  if (!status.ok()) return status;

  Statement fences(db,
                   "SELECT node, reason, decided, action FROM pending_fences ORDER BY decided, node");
  status = ForEachRow(fences, path, [&](Statement& row) {
    FenceRow& fence = state->fences.emplace_back();
    fence.node = row.Text(0);
    fence.reason = row.Text(1);
    fence.decided = row.Time(2);
    fence.action = row.Text(3) == FenceActionName(FenceAction::kUnfence) ? FenceAction::kUnfence
                                                                          : FenceAction::kFence;
  });
  if (!status.ok()) return status;

  Statement events(db,
                   "SELECT id, time, kind, job, generation, rank, node, message FROM ("
                   "  SELECT * FROM events ORDER BY id DESC LIMIT ?1) ORDER BY id");
  events.BindInt(1, Limit(max_events));
  absl::flat_hash_map<uint64_t, size_t> event_index;  // id -> index in state->events
  status = ForEachRow(events, path, [&](Statement& row) {
    const std::string kind_name = row.Text(2);
    const std::optional<EventKind> kind = EventKindFromName(kind_name);
    if (!kind.has_value()) {
      TRAINSUP_LOG_WARN("state database %s: skipping event %d of unknown kind \"%s\"", path,
                        row.Uint(0), absl::CHexEscape(kind_name));
      return;
    }
    Event& event = state->events.emplace_back();
    event.id = row.Uint(0);
    event.time = row.Time(1);
    event.kind = *kind;
    event.job = row.Text(3);
    event.generation = row.Uint(4);
    event.rank = row.Rank(5);
    event.node = row.Text(6);
    event.message = row.Text(7);
    event_index[event.id] = state->events.size() - 1;
  });
  if (!status.ok() || state->events.empty()) return status;

  Statement figures(db,
                    "SELECT event_id, name, value FROM event_figures WHERE event_id IN ("
                    "  SELECT id FROM events ORDER BY id DESC LIMIT ?1)"
                    " ORDER BY event_id, position");
  figures.BindInt(1, Limit(max_events));
  return ForEachRow(figures, path, [&](Statement& row) {
    auto it = event_index.find(row.Uint(0));
    if (it == event_index.end()) return;  // its event was skipped
    state->events[it->second].figures.emplace_back(row.Text(1), row.Double(2));
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("state database path is empty");
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  // The store owns `db` from here on, and closes it on every error path.
  std::unique_ptr<StateStore> store(new StateStore(path, db));
  if (rc != SQLITE_OK) return SqliteStatus(path, db, rc, "opening");
  absl::Status status = Initialize(db, path);
  if (!status.ok()) return status;
  return store;
}

StateStore::~StateStore() {
  // Every statement is finalized by now; _v2 closes even if one were not.
  const int rc = sqlite3_close_v2(db_);
  if (rc != SQLITE_OK) {
    TRAINSUP_LOG_ERROR("state database %s: closing failed: %s", path_, sqlite3_errstr(rc));
  }
}

absl::Status StateStore::Apply(const Journal& journal, Sync sync) {
  if (journal.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  // synchronous=FULL fsyncs the WAL at this commit; set per commit because
  // it is a property of the connection, not of a transaction.
  const bool full = sync == Sync::kFull;
  if (full) {
    absl::Status s = Exec(db_, path_, "PRAGMA synchronous = FULL", "setting synchronous mode");
    if (!s.ok()) return s;
  }
  absl::Status status = InTransaction(db_, path_, "BEGIN IMMEDIATE",
                                      [&]() { return WriteJournal(db_, path_, journal); });
  if (full) {
    absl::Status s = Exec(db_, path_, "PRAGMA synchronous = NORMAL", "setting synchronous mode");
    if (status.ok()) status = s;
  }
  return status;
}

absl::Status StateStore::Prune(absl::Time before) {
  static constexpr const char* kPrune[] = {
      "DELETE FROM failures WHERE time < ?1",
      "DELETE FROM restarts WHERE time < ?1",
      "DELETE FROM events WHERE time < ?1",  // and their figures (ON DELETE CASCADE)
      "DELETE FROM stacks WHERE time < ?1",
      "DELETE FROM job_measures WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
      " state IN ('finished', 'failed'))",
      "DELETE FROM ledger_generations WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
      " state IN ('finished', 'failed'))",
      "DELETE FROM jobs WHERE changed < ?1 AND state IN ('finished', 'failed')",
  };
  absl::MutexLock lock(&mu_);
  return InTransaction(db_, path_, "BEGIN IMMEDIATE", [&]() {
    for (const char* sql : kPrune) {
      Statement prune(db_, sql);
      prune.BindTime(1, before);
      if (const int rc = prune.Run(); rc != SQLITE_OK) {
        return SqliteStatus(path_, db_, rc, "pruning old history");
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<PersistedState> StateStore::Load(size_t max_events, size_t max_failures,
                                                size_t max_restarts) {
  absl::MutexLock lock(&mu_);
  PersistedState state;
  // One read transaction: a consistent snapshot of all tables.
  absl::Status status = InTransaction(db_, path_, "BEGIN", [&]() {
    return ReadState(db_, path_, max_events, max_failures, max_restarts, &state);
  });
  if (!status.ok()) return status;
  return state;
}

}  // namespace trainsup
