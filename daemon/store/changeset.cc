// The session extension's declarations are compiled in only with these, and
// Debian's libsqlite3 is built with them.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

#include "daemon/store/changeset.h"

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace store {

const std::vector<const char*>& SharedTables() {
  static const std::vector<const char*>* const kTables = new std::vector<const char*>{
      "nodes",         "failures",          "restarts",        "jobs",
      "job_measures",  "ledger_generations", "pending_fences",  "ended_jobs",
      "ended_job_nodes", "ended_job_ranks",  "checkpoint_fallbacks", "kill_criteria",
  };
  return *kTables;
}

ChangeRecorder::ChangeRecorder(const Db& db) : db_(db) {
  rc_ = sqlite3session_create(db.handle, "main", &session_);
  for (const char* table : SharedTables()) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3session_attach(session_, table);
  }
}

ChangeRecorder::~ChangeRecorder() {
  if (session_ != nullptr) sqlite3session_delete(session_);
}

absl::Status ChangeRecorder::Take(std::string* changeset) {
  if (rc_ != SQLITE_OK) return SqliteStatus(db_, rc_, "recording the shared tables' changes");
  int size = 0;
  void* data = nullptr;
  const int rc = sqlite3session_changeset(session_, &size, &data);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, "taking the changeset");
  changeset->assign(static_cast<const char*>(data), static_cast<size_t>(size));
  sqlite3_free(data);
  return absl::OkStatus();
}

absl::Status SnapshotShared(const Db& db, std::string* changeset) {
  std::string deleted;
  absl::Status status = Exec(db, "BEGIN IMMEDIATE", "starting a transaction");
  if (!status.ok()) return status;
  {
    ChangeRecorder recorder(db);
    for (const char* table : SharedTables()) {
      const std::string sql = absl::StrCat("DELETE FROM ", table);
      status = Exec(db, sql.c_str(), "reading the shared tables");
      if (!status.ok()) break;
    }
    if (status.ok()) status = recorder.Take(&deleted);
  }
  // Nothing of it is kept.
  sqlite3_exec(db.handle, "ROLLBACK", nullptr, nullptr, nullptr);
  if (!status.ok()) return status;
  if (deleted.empty()) {
    changeset->clear();
    return absl::OkStatus();
  }
  int size = 0;
  void* data = nullptr;
  const int rc = sqlite3changeset_invert(static_cast<int>(deleted.size()), deleted.data(),
                                         &size, &data);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, "inverting the snapshot");
  changeset->assign(static_cast<const char*>(data), static_cast<size_t>(size));
  sqlite3_free(data);
  return absl::OkStatus();
}

namespace {

// The latest writer wins: a row already there is replaced, a change to a
// row no longer there is skipped.
int OnConflict(void*, int conflict, sqlite3_changeset_iter*) {
  switch (conflict) {
    case SQLITE_CHANGESET_DATA:
    case SQLITE_CHANGESET_CONFLICT:
      return SQLITE_CHANGESET_REPLACE;
    default:
      return SQLITE_CHANGESET_OMIT;
  }
}

}  // namespace

absl::Status ReplaceShared(const Db& db, const std::vector<std::string>& changesets) {
  return InTransaction(db, "BEGIN IMMEDIATE", [&]() -> absl::Status {
    for (const char* table : SharedTables()) {
      const std::string sql = absl::StrCat("DELETE FROM ", table);
      if (absl::Status s = Exec(db, sql.c_str(), "emptying the shared tables"); !s.ok()) return s;
    }
    for (size_t i = 0; i < changesets.size(); ++i) {
      const std::string& c = changesets[i];
      if (c.empty()) continue;
      const int rc = sqlite3changeset_apply(db.handle, static_cast<int>(c.size()),
                                            const_cast<char*>(c.data()), nullptr, OnConflict,
                                            nullptr);
      if (rc != SQLITE_OK) {
        absl::Status s = SqliteStatus(db, rc, absl::StrCat("applying shared change ", i + 1, " of ",
                                                           changesets.size()));
        return absl::DataLossError(s.message());
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace store
}  // namespace trainsup
