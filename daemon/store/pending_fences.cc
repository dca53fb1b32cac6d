// The pending_fences table: fences (and unfences) decided and not yet seen
// to succeed, one per node.
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreatePendingFences =
    "CREATE TABLE pending_fences ("
    "  node TEXT PRIMARY KEY NOT NULL, reason TEXT NOT NULL, decided REAL)";
constexpr const char* kAddFenceAction =
    "ALTER TABLE pending_fences ADD COLUMN action TEXT NOT NULL DEFAULT 'fence'";

// Pending rows are upserted by node, cleared ones deleted.
absl::Status Write(const Db& db, const Journal& journal) {
  if (journal.fences.empty()) return absl::OkStatus();
  Statement upsert(db,
                   "INSERT OR REPLACE INTO pending_fences (node, reason, decided, action)"
                   " VALUES (?1, ?2, ?3, ?4)");
  Statement clear(db, "DELETE FROM pending_fences WHERE node = ?1");
  for (const FenceRow& row : journal.fences) {
    absl::Status s;
    if (row.pending) {
      upsert.BindText(1, row.node);
      upsert.BindText(2, row.reason);
      upsert.BindTime(3, row.decided);
      upsert.BindText(4, FenceActionName(row.action));
      s = upsert.Run("writing the journal");
    } else {
      clear.BindText(1, row.node);
      s = clear.Run("writing the journal");
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT node, reason, decided, action FROM pending_fences ORDER BY decided, node");
  return ForEachRow(db, select, [&](Statement& row) {
    FenceRow& fence = state->fences.emplace_back();
    fence.node = row.Text(0);
    fence.reason = row.Text(1);
    fence.decided = row.Time(2);
    fence.action = row.Text(3) == FenceActionName(FenceAction::kUnfence) ? FenceAction::kUnfence
                                                                          : FenceAction::kFence;
  });
}

}  // namespace

const TableCodec& PendingFencesTable() {
  static const TableCodec* const kCodec = new TableCodec{
      // As a migrated store has it: the action column last.
      {kCreatePendingFences, kAddFenceAction},
      {
          // Fences are journaled as pending before they run.
          {4, {kCreatePendingFences}},
          // An operator's unquarantine is journaled as a pending unfence.
          {5, {kAddFenceAction}},
      },
      Write,
      Read,
      {},  // pending until done
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
