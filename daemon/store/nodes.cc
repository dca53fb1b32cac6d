// The nodes table: each node's quarantine record, the latest one of a node.
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

absl::Status Write(const Db& db, const Journal& journal) {
  return RunForEach(db,
                    "INSERT OR REPLACE INTO nodes (name, quarantined, reason, changed, changed_by)"
                    " VALUES (?1, ?2, ?3, ?4, ?5)",
                    journal.nodes, [](Statement& s, const NodeRecordRow& row) {
                      s.BindText(1, row.name);
                      s.BindBool(2, row.quarantined);
                      s.BindText(3, row.reason);
                      s.BindTime(4, row.changed);
                      s.BindText(5, row.changed_by);
                    });
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT name, quarantined, reason, changed, changed_by FROM nodes ORDER BY name");
  return ForEachRow(db, select, [&](Statement& row) {
    NodeRecordRow& node = state->nodes.emplace_back();
    node.name = row.Text(0);
    node.quarantined = row.Bool(1);
    node.reason = row.Text(2);
    node.changed = row.Time(3);
    node.changed_by = row.Text(4);
  });
}

}  // namespace

const TableCodec& NodesTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {"CREATE TABLE nodes ("
       "  name TEXT PRIMARY KEY NOT NULL, quarantined INTEGER NOT NULL,"
       "  reason TEXT NOT NULL, changed REAL, changed_by TEXT NOT NULL)"},
      {},
      Write,
      Read,
      {},  // the quarantine list is kept
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
