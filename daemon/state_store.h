#ifndef TRAINSUP_DAEMON_STATE_STORE_H_
#define TRAINSUP_DAEMON_STATE_STORE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/journal.h"
#include "daemon/journal_writer.h"
#include "daemon/store/schema.h"
#include "trainsup/v1/provenance.pb.h"

struct sqlite3;

namespace trainsup {

// The supervisor's durable memory: a SQLite database (WAL mode) holding the
// records of daemon/core/journal.h, one table codec each (daemon/store/). The driver writes each Journal with
// Apply() before acting on it, and reads everything back with Load() at
// start-up.
//
// Durability: a Journal for which Apply() returned OK survives a kill -9 of
// the process (WAL with synchronous=NORMAL); a power loss may lose the last
// few transactions, never corrupt the file. Apply(..., Sync::kFull) also
// survives a power loss (synchronous=FULL: fsynced before it returns); the
// driver asks for it when a fence is about to run.
//
// One process at a time: Open() takes an exclusive flock(2) on the file,
// held until the store is destroyed, so a second trainsupd on the same file
// fails at start-up with Unavailable. Readers are welcome meanwhile
// (`sqlite3 -readonly FILE`, docs/recovery.md): WAL gives each one the last
// committed state without blocking a commit; a reader that stays in one
// read transaction only keeps the write-ahead log from being recycled.
//
// Every error message names the database path.
//
// Thread-safe: calls are serialized by an internal mutex.
class StateStore : public JournalSink {
 public:
  // The schema this build writes. A database of an older version is migrated
  // when opened (logged; all or nothing); a newer one is refused.
  static constexpr int kSchemaVersion = store::kSchemaVersion;
  // The newest events trainsupd reads back when it restores, and so the
  // most a snapshot of the shared state carries (SnapshotShared).
  static constexpr size_t kEventsRestored = 10000;

  // Opens the database at `path`, creating the file and the schema if
  // missing, and checks it (PRAGMA quick_check). Errors:
  //   DataLoss            the file is not a SQLite database, or is corrupt
  //   Unavailable         another store holds the file (another trainsupd,
  //                       or a writer that holds its write lock)
  //   FailedPrecondition  a newer schema version, or a SQLite database of
  //                       some other program, or one that cannot use WAL
  //   NotFound / PermissionDenied / ...  the file cannot be opened or
  //                       created (missing directory, permissions)
  // A file that is refused is left unmodified.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& path);
  // A store in memory (nothing survives the process): the local copy of an
  // instance whose state is shared through etcd and that has no --state.
  static absl::StatusOr<std::unique_ptr<StateStore>> OpenInMemory();

  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Closes the database, then releases the lock.
  ~StateStore() override;

  // Writes every row of `journal` in one transaction: on error nothing of it
  // is stored. Nodes and jobs are upserted by name (the latest row wins);
  // failures, restarts and events are appended. An event id already stored
  // (or repeated within `journal`) is an error (InvalidArgument). Pending
  // fences are upserted by node, cleared ones deleted.
  absl::Status Apply(const Journal& journal, Sync sync) override;
  absl::Status Apply(const Journal& journal) { return Apply(journal, Sync::kNormal); }
  // Apply, and also sets `changeset` to what it changed in the tables shared
  // through etcd (store/changeset.h; "" when it changed none of them).
  absl::Status Apply(const Journal& journal, Sync sync, std::string* changeset);

  // A changeset that inserts every row of the shared tables as they are now,
  // of the events only the newest `max_events` (store/changeset.h).
  absl::Status SnapshotShared(std::string* changeset, size_t max_events = kEventsRestored);
  // Replaces the shared tables' rows (the events' too) with those
  // `changesets` make, applied in order to empty tables, in one
  // transaction. This instance's own history (stacks, provenance) is kept.
  absl::Status ReplaceShared(const std::vector<std::string>& changesets);

  // Everything stored: every node and every job (latest row of each, by
  // name), and the most recent `max_failures` failures, `max_restarts`
  // restarts (in the order they were applied) and `max_events` events (by
  // id), and every pending fence. Each list is ordered oldest first. An event whose kind this build
  // does not know is skipped with a warning.
  absl::StatusOr<PersistedState> Load(size_t max_events, size_t max_failures, size_t max_restarts);

  // Deletes the history older than `before`, in one transaction: failures,
  // restarts, events (but the newest, whatever its age: the next event's id
  // follows it, never restarts) and stacks, and the jobs that finished or
  // failed before it (with their measures). Nodes (the quarantine list) are
  // kept.
  absl::Status Prune(absl::Time before);

  // A node's record of a generation of `job` (docs/provenance.md), stored
  // at once and apart from the journals: it replaces the node's earlier one
  // of that generation. Pruned with the history.
  absl::Status PutProvenance(const std::string& job, const v1::GenerationProvenance& record,
                             absl::Time now);
  // The records of `job`'s `generation`, by node (appended to `records`).
  absl::Status Provenance(const std::string& job, uint64_t generation,
                          std::vector<v1::GenerationProvenance>* records);

  const std::string& path() const { return path_; }

 private:
  StateStore(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}

  const std::string path_;
  const int lock_fd_;  // owned: the file, flock()ed while open; -1 in memory
  absl::Mutex mu_;
  sqlite3* db_ ABSL_PT_GUARDED_BY(mu_) = nullptr;  // owned; set once by Open()
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STATE_STORE_H_
