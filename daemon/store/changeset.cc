// The session extension's declarations are compiled in only with these, and
// Debian's libsqlite3 is built with them.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

#include "daemon/store/changeset.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainsup {
namespace store {

const std::vector<const char*>& SharedTables() {
  static const std::vector<const char*>* const kTables = new std::vector<const char*>{
      "nodes",         "failures",          "restarts",        "jobs",
      "job_measures",  "ledger_generations", "pending_fences",  "ended_jobs",
      "ended_job_nodes", "ended_job_ranks",  "checkpoint_fallbacks", "kill_criteria",
      "events",        "event_figures",
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

namespace {

// What a snapshot deletes (and so carries) of `table`: every row, but of
// the events only the newest `max_events`.
std::string SnapshotDelete(absl::string_view table, size_t max_events) {
  const std::string newest =
      absl::StrCat("(SELECT id FROM events ORDER BY id DESC LIMIT ", max_events, ")");
  if (table == "events") return absl::StrCat("DELETE FROM events WHERE id IN ", newest);
  if (table == "event_figures") {
    return absl::StrCat("DELETE FROM event_figures WHERE event_id IN ", newest);
  }
  return absl::StrCat("DELETE FROM ", table);
}

}  // namespace

absl::Status SnapshotShared(const Db& db, size_t max_events, std::string* changeset) {
  std::string deleted;
  absl::Status status = Exec(db, "BEGIN IMMEDIATE", "starting a transaction");
  if (!status.ok()) return status;
  {
    ChangeRecorder recorder(db);
    // Rows that refer to others first: an event's figures go before the
    // event, which would take them with it (ON DELETE CASCADE) and leave
    // the figures' own delete nothing to pick.
    const std::vector<const char*>& tables = SharedTables();
    for (auto table = tables.rbegin(); table != tables.rend(); ++table) {
      const std::string sql = SnapshotDelete(*table, max_events);
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
