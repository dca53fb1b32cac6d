// The restarts table: every coordinated restart, in the order applied (`seq`).
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

absl::Status Write(const Db& db, const Journal& journal) {
  return RunForEach(db,
                    "INSERT INTO restarts (time, job, from_generation, to_generation, reason)"
                    " VALUES (?1, ?2, ?3, ?4, ?5)",
                    journal.restarts, [](Statement& s, const RestartRow& row) {
                      s.BindTime(1, row.time);
                      s.BindText(2, row.job);
                      s.BindUint(3, row.from_generation);
                      s.BindUint(4, row.to_generation);
                      s.BindText(5, row.reason);
                    });
}

absl::Status Read(const Db& db, const LoadLimits& limits, PersistedState* state) {
  Statement select(db,
                   "SELECT time, job, from_generation, to_generation, reason FROM ("
                   "  SELECT * FROM restarts ORDER BY seq DESC LIMIT ?1) ORDER BY seq");
  select.BindInt(1, Limit(limits.restarts));
  return ForEachRow(db, select, [&](Statement& row) {
    RestartRow& restart = state->restarts.emplace_back();
    restart.time = row.Time(0);
    restart.job = row.Text(1);
    restart.from_generation = row.Uint(2);
    restart.to_generation = row.Uint(3);
    restart.reason = row.Text(4);
  });
}

}  // namespace

const TableCodec& RestartsTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {"CREATE TABLE restarts ("
       "  seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL, job TEXT NOT NULL,"
       "  from_generation INTEGER NOT NULL, to_generation INTEGER NOT NULL,"
       "  reason TEXT NOT NULL)"},
      {},
      Write,
      Read,
      {"DELETE FROM restarts WHERE time < ?1"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
