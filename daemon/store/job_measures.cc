// The job_measures table (a job's ledger and recent costs, the latest of a
// job) and ledger_generations (its ledger by generation).
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateJobMeasures =
    "CREATE TABLE job_measures ("
    "  job TEXT PRIMARY KEY NOT NULL, ledger_start REAL, ledger_last REAL,"
    "  ledger_generation INTEGER NOT NULL, ledger_high_water INTEGER NOT NULL,"
    "  checkpoint_costs TEXT NOT NULL, checkpoint_async TEXT NOT NULL,"
    "  restart_costs TEXT NOT NULL)";
constexpr const char* kCreateLedgerGenerations =
    "CREATE TABLE ledger_generations ("
    "  job TEXT NOT NULL, generation INTEGER NOT NULL, useful REAL NOT NULL,"
    "  starved REAL NOT NULL, checkpoint_blocked REAL NOT NULL, lost REAL NOT NULL,"
    "  PRIMARY KEY (job, generation)) WITHOUT ROWID";

absl::Status Write(const Db& db, const Journal& journal) {
  if (journal.measures.empty()) return absl::OkStatus();
  Statement upsert(db,
                   "INSERT OR REPLACE INTO job_measures (job, ledger_start, ledger_last,"
                   " ledger_generation, ledger_high_water, checkpoint_costs, checkpoint_async,"
                   " restart_costs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  Statement generation(db,
                       "INSERT OR REPLACE INTO ledger_generations (job, generation, useful,"
                       " starved, checkpoint_blocked, lost) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (const JobMeasuresRow& row : journal.measures) {
    upsert.BindText(1, row.job);
    upsert.BindTime(2, row.ledger.start);
    upsert.BindTime(3, row.ledger.last);
    upsert.BindUint(4, row.ledger.generation);
    upsert.BindInt(5, row.ledger.high_water_step);
    upsert.BindText(6, JoinSeconds(row.checkpoint_costs));
    upsert.BindText(7, JoinSeconds(row.checkpoint_async));
    upsert.BindText(8, JoinSeconds(row.restart_costs));
    if (absl::Status s = upsert.Run("writing the journal"); !s.ok()) return s;
    for (const auto& [gen, totals] : row.ledger.by_generation) {
      generation.BindText(1, row.job);
      generation.BindUint(2, gen);
      for (int b = 0; b < kBucketCount; ++b) generation.BindDouble(3 + b, totals.seconds[b]);
      if (absl::Status s = generation.Run("writing the journal"); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement measures(db,
                     "SELECT job, ledger_start, ledger_last, ledger_generation, ledger_high_water,"
                     " checkpoint_costs, checkpoint_async, restart_costs FROM job_measures"
                     " ORDER BY job");
  absl::flat_hash_map<std::string, size_t> index;  // job -> index in state->measures
  absl::Status status = ForEachRow(db, measures, [&](Statement& row) {
    JobMeasuresRow& m = state->measures.emplace_back();
    m.job = row.Text(0);
    m.ledger.start = row.Time(1);
    m.ledger.last = row.Time(2);
    m.ledger.generation = row.Uint(3);
    m.ledger.high_water_step = row.Int(4);
    m.checkpoint_costs = SplitSeconds(row.Text(5));
    m.checkpoint_async = SplitSeconds(row.Text(6));
    m.restart_costs = SplitSeconds(row.Text(7));
    index[m.job] = state->measures.size() - 1;
  });
  if (!status.ok()) return status;
  Statement generations(db,
                        "SELECT job, generation, useful, starved, checkpoint_blocked, lost"
                        " FROM ledger_generations ORDER BY job, generation");
  return ForEachRow(db, generations, [&](Statement& row) {
    auto it = index.find(row.Text(0));
    if (it == index.end()) return;
    LedgerTotals& totals = state->measures[it->second].ledger.by_generation[row.Uint(1)];
    for (int b = 0; b < kBucketCount; ++b) {
      const double v = row.Double(2 + b);
      totals.seconds[b] = std::isfinite(v) && v > 0 ? v : 0;
    }
  });
}

}  // namespace

const TableCodec& JobMeasuresTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {kCreateJobMeasures, kCreateLedgerGenerations},
      {
          // What jobs measured (ledger, C, R).
          {3, {kCreateJobMeasures, kCreateLedgerGenerations}},
      },
      Write,
      Read,
      // The measures of the jobs the jobs table is about to prune.
      {"DELETE FROM job_measures WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
       " state IN ('finished', 'failed'))",
       "DELETE FROM ledger_generations WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
       " state IN ('finished', 'failed'))"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
