#include "daemon/state_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/store/changeset.h"
#include "daemon/store/provenance.h"
#include "daemon/store/schema.h"
#include "daemon/store/sqlite.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace {

using store::Db;
using store::Exec;
using store::ForEachRow;
using store::InTransaction;
using store::SqliteStatus;
using store::Statement;
using store::TableCodec;
using store::Tables;

constexpr int kBusyTimeoutMs = 1000;

// Opens the database file, creating it if missing, and takes an exclusive
// flock(2) on it: one trainsupd per file. SQLite's own locks are POSIX
// record locks, which flock does not touch, so readers (`sqlite3 -readonly`)
// are not kept out. Returns the descriptor, to keep open until SQLite has
// closed the file (closing another descriptor of the file would drop
// SQLite's locks).
absl::StatusOr<int> LockFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    struct stat st;
    if ((error == EACCES || error == EROFS) && stat(path.c_str(), &st) == 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "state database ", path, " can only be opened read-only; check its permissions"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("state database ", path, ": opening failed"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd);
    if (error == EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("state database ", path,
                       " is locked by another process (is another trainsupd running on it?)"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("state database ", path, ": locking failed"));
  }
  return fd;
}

// Checks and prepares the database. Reads before it writes, so that a file
// that is not a database or is corrupt is refused unmodified.
absl::Status Initialize(const Db& db, bool in_memory) {
  sqlite3_extended_result_codes(db.handle, 1);
  sqlite3_busy_timeout(db.handle, kBusyTimeoutMs);
  if (sqlite3_db_readonly(db.handle, "main") == 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        "state database ", db.path, " can only be opened read-only; check its permissions"));
  }
  // The first read: fails on a file that is not a database.
  absl::Status status = Exec(db, "SELECT count(*) FROM sqlite_master", "reading the schema");
  if (!status.ok()) return status;

  std::vector<std::string> problems;
  Statement check(db, "PRAGMA quick_check");
  status = ForEachRow(db, check, [&](Statement& row) {
    std::string line = row.Text(0);
    if (line != "ok" && problems.size() < 5) problems.push_back(std::move(line));
  });
  if (!status.ok()) return status;
  if (!problems.empty()) {
    return absl::DataLossError(absl::StrCat(
        "state database ", db.path,
        " is corrupt or not a trainsup database: quick_check: ", absl::StrJoin(problems, "; ")));
  }

  store::SchemaCheck schema;
  status = store::CheckSchema(db, &schema);
  if (!status.ok()) return status;

  // In memory too: an event's figures go with it (ON DELETE CASCADE) when
  // the history is pruned or the shared tables replaced.
  status = Exec(db, "PRAGMA foreign_keys = ON", "enabling foreign keys");
  if (!status.ok()) return status;
  if (in_memory) {
    return InTransaction(db, "BEGIN IMMEDIATE",
                         [&]() { return store::CreateOrMigrate(db, schema); });
  }
  // Switched only once the file passed the checks above. The WAL index is
  // shared memory (the -shm file beside the database), which readers map too.
  std::string journal_mode;
  Statement wal(db, "PRAGMA journal_mode = WAL");
  status = ForEachRow(db, wal, [&](Statement& row) { journal_mode = row.Text(0); });
  if (!status.ok()) return status;
  if (journal_mode != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", db.path, " cannot use WAL journal mode (it is in \"",
                     journal_mode, "\" mode); it must be a file on a local file system"));
  }
  // WAL with synchronous=NORMAL: a committed transaction survives a crash of
  // the process; only a power loss can lose the last few.
  status = Exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous mode");
  if (!status.ok()) return status;

  return InTransaction(db, "BEGIN IMMEDIATE", [&]() { return store::CreateOrMigrate(db, schema); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("state database path is empty");
  absl::StatusOr<int> lock_fd = LockFile(path);
  if (!lock_fd.ok()) return lock_fd.status();
  // The store owns the lock and the connection from here on, and releases
  // them on every error path.
  std::unique_ptr<StateStore> store(new StateStore(path, *lock_fd));
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  store->db_ = db;
  if (rc != SQLITE_OK) return SqliteStatus(path, db, rc, "opening");
  absl::Status status = Initialize(Db{db, store->path_}, /*in_memory=*/false);
  if (!status.ok()) return status;
  return store;
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::OpenInMemory() {
  std::unique_ptr<StateStore> store(new StateStore(":memory:", -1));
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(":memory:", &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  store->db_ = db;
  if (rc != SQLITE_OK) return SqliteStatus(store->path_, db, rc, "opening");
  absl::Status status = Initialize(Db{db, store->path_}, /*in_memory=*/true);
  if (!status.ok()) return status;
  return store;
}

StateStore::~StateStore() {
  // Every statement is finalized by now; _v2 closes even if one were not.
  const int rc = sqlite3_close_v2(db_);
  if (rc != SQLITE_OK) {
    TRAINSUP_LOG_ERROR("state database %s: closing failed: %s", path_, sqlite3_errstr(rc));
  }
  if (lock_fd_ >= 0) close(lock_fd_);  // and with it the flock
}

absl::Status StateStore::Apply(const Journal& journal, Sync sync) {
  return Apply(journal, sync, nullptr);
}

absl::Status StateStore::Apply(const Journal& journal, Sync sync, std::string* changeset) {
  if (changeset != nullptr) changeset->clear();
  if (journal.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  const Db db{db_, path_};
  // synchronous=FULL fsyncs the WAL at this commit; set per commit because
  // it is a property of the connection, not of a transaction.
  const bool full = sync == Sync::kFull;
  if (full) {
    absl::Status s = Exec(db, "PRAGMA synchronous = FULL", "setting synchronous mode");
    if (!s.ok()) return s;
  }
  std::optional<store::ChangeRecorder> recorder;
  if (changeset != nullptr) recorder.emplace(db);
  absl::Status status = InTransaction(db, "BEGIN IMMEDIATE", [&]() {
    for (const TableCodec* table : Tables()) {
      if (absl::Status s = table->write(db, journal); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  if (status.ok() && recorder.has_value()) status = recorder->Take(changeset);
  if (full) {
    absl::Status s = Exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous mode");
    if (status.ok()) status = s;
  }
  return status;
}

absl::Status StateStore::Prune(absl::Time before) {
  absl::MutexLock lock(&mu_);
  const Db db{db_, path_};
  return InTransaction(db, "BEGIN IMMEDIATE", [&]() {
    // Last listed first: a table whose pruning looks at another comes after it.
    for (auto table = Tables().rbegin(); table != Tables().rend(); ++table) {
      for (const char* sql : (*table)->prune) {
        Statement prune(db, sql);
        prune.BindTime(1, before);
        if (absl::Status s = prune.Run("pruning old history"); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<PersistedState> StateStore::Load(size_t max_events, size_t max_failures,
                                                size_t max_restarts) {
  absl::MutexLock lock(&mu_);
  const Db db{db_, path_};
  const store::LoadLimits limits{max_events, max_failures, max_restarts};
  PersistedState state;
  // One read transaction: a consistent snapshot of all tables.
  absl::Status status = InTransaction(db, "BEGIN", [&]() {
    for (const TableCodec* table : Tables()) {
      if (absl::Status s = table->read(db, limits, &state); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return state;
}

absl::Status StateStore::SnapshotShared(std::string* changeset, size_t max_events) {
  absl::MutexLock lock(&mu_);
  return store::SnapshotShared(Db{db_, path_}, max_events, changeset);
}

absl::Status StateStore::ReplaceShared(const std::vector<std::string>& changesets) {
  absl::MutexLock lock(&mu_);
  return store::ReplaceShared(Db{db_, path_}, changesets);
}

absl::Status StateStore::PutProvenance(const std::string& job,
                                       const v1::GenerationProvenance& record, absl::Time now) {
  absl::MutexLock lock(&mu_);
  return store::PutProvenance(store::Db{db_, path_}, job, record, now);
}

absl::Status StateStore::Provenance(const std::string& job, uint64_t generation,
                                    std::vector<v1::GenerationProvenance>* records) {
  absl::MutexLock lock(&mu_);
  return store::ReadProvenance(store::Db{db_, path_}, job, generation, records);
}

}  // namespace trainsup
