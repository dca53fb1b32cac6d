// The failures table: every failure attributed to a job, in the order
// applied (`seq`).
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

absl::Status Write(const Db& db, const Journal& journal) {
  return RunForEach(db,
                    "INSERT INTO failures (time, job, generation, kind, node, rank, message,"
                    " charged) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    journal.failures, [](Statement& s, const FailureRow& row) {
                      s.BindTime(1, row.time);
                      s.BindText(2, row.job);
                      s.BindUint(3, row.generation);
                      s.BindText(4, row.kind);
                      s.BindText(5, row.node);
                      s.BindRank(6, row.rank);
                      s.BindText(7, row.message);
                      s.BindBool(8, row.charged);
                    });
}

absl::Status Read(const Db& db, const LoadLimits& limits, PersistedState* state) {
  Statement select(db,
                   "SELECT time, job, generation, kind, node, rank, message, charged FROM ("
                   "  SELECT * FROM failures ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  select.BindInt(1, Limit(limits.failures));
  return ForEachRow(db, select, [&](Statement& row) {
    FailureRow& failure = state->failures.emplace_back();
    failure.time = row.Time(0);
    failure.job = row.Text(1);
    failure.generation = row.Uint(2);
    failure.kind = row.Text(3);
    failure.node = row.Text(4);
    failure.rank = row.Rank(5);
    failure.message = row.Text(6);
    failure.charged = row.Bool(7);
  });
}

}  // namespace

const TableCodec& FailuresTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {"CREATE TABLE failures ("
       "  seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL, job TEXT NOT NULL,"
       "  generation INTEGER NOT NULL, kind TEXT NOT NULL, node TEXT NOT NULL,"
       "  rank INTEGER, message TEXT NOT NULL, charged INTEGER NOT NULL DEFAULT 1)"},
      {
          // Whether a failure counts toward its node's quarantine (all did before).
          {3, {"ALTER TABLE failures ADD COLUMN charged INTEGER NOT NULL DEFAULT 1"}},
      },
      Write,
      Read,
      {"DELETE FROM failures WHERE time < ?1"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
