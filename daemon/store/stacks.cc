// The stacks table: the Python stacks of hung generations' ranks, in the
// order collected (`seq`).
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateStacks =
    "CREATE TABLE stacks ("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, generation INTEGER NOT NULL,"
    "  event_id INTEGER NOT NULL, time REAL, collect_seconds REAL NOT NULL, culprit INTEGER,"
    "  rank INTEGER NOT NULL, node TEXT NOT NULL, answered INTEGER NOT NULL,"
    "  text TEXT NOT NULL)";

// The most recent stack rows loaded at start-up (a few hung generations of
// the biggest jobs; older ones stay on disk).
constexpr size_t kRestoredStackRows = 8192;

absl::Status Write(const Db& db, const Journal& journal) {
  return RunForEach(db,
                    "INSERT INTO stacks (job, generation, event_id, time, collect_seconds,"
                    " culprit, rank, node, answered, text)"
                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    journal.stacks, [](Statement& s, const StackRow& row) {
                      s.BindText(1, row.job);
                      s.BindUint(2, row.generation);
                      s.BindUint(3, row.event_id);
                      s.BindTime(4, row.time);
                      s.BindDouble(5, row.collect_seconds);
                      s.BindRank(6, row.culprit);
                      s.BindInt(7, row.rank);
                      s.BindText(8, row.node);
                      s.BindBool(9, row.answered);
                      s.BindText(10, row.text);
                    });
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT job, generation, event_id, time, collect_seconds, culprit, rank, node,"
                   " answered, text FROM ("
                   "  SELECT * FROM stacks ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  select.BindInt(1, Limit(kRestoredStackRows));
  return ForEachRow(db, select, [&](Statement& row) {
    StackRow& s = state->stacks.emplace_back();
    s.job = row.Text(0);
    s.generation = row.Uint(1);
    s.event_id = row.Uint(2);
    s.time = row.Time(3);
    s.collect_seconds = row.Double(4);
    s.culprit = row.Rank(5);
    s.rank = static_cast<uint32_t>(row.Int(6));
    s.node = row.Text(7);
    s.answered = row.Bool(8);
    s.text = row.Text(9);
  });
}

}  // namespace

const TableCodec& StacksTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {kCreateStacks},
      {
          // Hung jobs' stacks.
          {3, {kCreateStacks}},
      },
      Write,
      Read,
      {"DELETE FROM stacks WHERE time < ?1"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
