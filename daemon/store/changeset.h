#ifndef TRAINSUP_DAEMON_STORE_CHANGESET_H_
#define TRAINSUP_DAEMON_STORE_CHANGESET_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/store/sqlite.h"

// The state store's shared tables as SQLite changesets (the session
// extension): what instances under an election share through etcd
// (docs/ha.md). A changeset is SQLite's own compact binary record of the
// rows a transaction inserted, updated and deleted, with their primary keys;
// applying it to another copy of the tables repeats the change.
namespace trainsup {
namespace store {

// The tables whose rows are the supervisor's decisions (quarantines, jobs
// and their holds, failures, restarts, pending fences, measures, ended jobs'
// pictures, fallbacks, kill criteria), and the events with their figures:
// one history, which a new leader shows and numbers on from. Stacks and
// provenance are each instance's own and are left out. A table comes after
// the one its rows refer to (an event's figures after the events).
const std::vector<const char*>& SharedTables();

// Records what a transaction does to the shared tables. Create it before the
// transaction's first write. Thread-compatible; one per connection at a time.
class ChangeRecorder {
 public:
  explicit ChangeRecorder(const Db& db);
  ~ChangeRecorder();
  ChangeRecorder(const ChangeRecorder&) = delete;
  ChangeRecorder& operator=(const ChangeRecorder&) = delete;

  // The changeset of everything recorded so far ("" when nothing changed).
  absl::Status Take(std::string* changeset);

 private:
  const Db db_;
  struct sqlite3_session* session_ = nullptr;
  int rc_ = 0;  // of creating and attaching
};

// A changeset that inserts every row the shared tables hold now, but of the
// events only the newest `max_events` (by id) and their figures: the bound
// on what a snapshot in etcd carries of a history pruned only by age. It
// deletes them in a transaction it rolls back, and inverts what it recorded.
absl::Status SnapshotShared(const Db& db, size_t max_events, std::string* changeset);

// In one transaction: empties the shared tables, then applies `changesets`
// in order (a row already there is replaced, a change to a missing one
// skipped). A changeset that cannot be read is an error (DataLoss) and
// nothing is changed.
absl::Status ReplaceShared(const Db& db, const std::vector<std::string>& changesets);

}  // namespace store
}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STORE_CHANGESET_H_
