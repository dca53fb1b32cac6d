#ifndef TRAINSUP_DAEMON_STORE_TABLE_CODEC_H_
#define TRAINSUP_DAEMON_STORE_TABLE_CODEC_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/journal.h"
#include "daemon/store/sqlite.h"

namespace trainsup {
namespace store {

// How many of the most recent rows of each bounded history Load() reads.
struct LoadLimits {
  size_t events = 0;
  size_t failures = 0;
  size_t restarts = 0;
};

// One table of the state store (or a table and the child tables its rows
// own: an event's figures, a job's ledger by generation): how it is created,
// how each schema version changed it, how a Journal's rows are written to it
// and read back, and how its old history is pruned. A new table is a new
// codec: one file, listed in Tables(). Codecs are stateless and run inside
// the store's transactions.
struct TableCodec {
  // Statements that create it as the newest schema has it (a new store).
  std::vector<const char*> create;
  // What the schema versions changed in it: {version, the statements that
  // take a store of version - 1 to version}. A version that did not change
  // it is absent.
  std::vector<std::pair<int, std::vector<const char*>>> migrations;
  // Writes the journal's rows for it.
  absl::Status (*write)(const Db& db, const Journal& journal);
  // Reads its rows into `state`.
  absl::Status (*read)(const Db& db, const LoadLimits& limits, PersistedState* state);
  // Statements that delete its history older than ?1 (a time); empty: it
  // keeps everything.
  std::vector<const char*> prune;
};

// The tables, in the order they are created, migrated, written and read.
// Prune() goes in the reverse order: a table whose pruning looks at another
// (a job's measures at its job) is listed after it.
const std::vector<const TableCodec*>& Tables();

// One per table, each in its own file.
const TableCodec& NodesTable();
const TableCodec& FailuresTable();
const TableCodec& RestartsTable();
const TableCodec& JobsTable();
const TableCodec& EventsTable();
const TableCodec& JobMeasuresTable();
const TableCodec& StacksTable();
const TableCodec& PendingFencesTable();
const TableCodec& EndedJobsTable();
const TableCodec& FallbacksTable();
const TableCodec& KillCriteriaTable();
const TableCodec& ProvenanceTable();

}  // namespace store
}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STORE_TABLE_CODEC_H_
