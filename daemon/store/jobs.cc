// The jobs table: each job's lifecycle record, the latest one of a job.
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

absl::Status Write(const Db& db, const Journal& journal) {
  return RunForEach(
      db,
      "INSERT OR REPLACE INTO jobs (job, generation, state, reason, world_size, changed,"
      " exposure_seconds, restarts_forgiven_before, restarts, failures)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
      journal.jobs, [](Statement& s, const JobRow& row) {
        s.BindText(1, row.job);
        s.BindUint(2, row.generation);
        s.BindText(3, row.state);
        s.BindText(4, row.reason);
        s.BindInt(5, row.world_size);
        s.BindTime(6, row.changed);
        s.BindDouble(7, row.exposure_seconds);
        s.BindTime(8, row.restarts_forgiven_before);
        s.BindUint(9, row.restarts);
        s.BindUint(10, row.failures);
      });
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT job, generation, state, reason, world_size, changed, exposure_seconds,"
                   " restarts_forgiven_before, restarts, failures FROM jobs ORDER BY job");
  return ForEachRow(db, select, [&](Statement& row) {
    JobRow& job = state->jobs.emplace_back();
    job.job = row.Text(0);
    job.generation = row.Uint(1);
    job.state = row.Text(2);
    job.reason = row.Text(3);
    job.world_size = static_cast<uint32_t>(row.Int(4));
    job.changed = row.Time(5);
    job.exposure_seconds = row.Double(6);
    job.restarts_forgiven_before = row.Time(7);
    job.restarts = row.Uint(8);
    job.failures = row.Uint(9);
  });
}

}  // namespace

const TableCodec& JobsTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {"CREATE TABLE jobs ("
       "  job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
       "  state TEXT NOT NULL, reason TEXT NOT NULL, world_size INTEGER NOT NULL,"
       "  changed REAL, exposure_seconds REAL NOT NULL DEFAULT 0,"
       "  restarts_forgiven_before REAL, restarts INTEGER NOT NULL DEFAULT 0,"
       "  failures INTEGER NOT NULL DEFAULT 0)"},
      {
          // An operator's resume is kept with its job.
          {2, {"ALTER TABLE jobs ADD COLUMN restarts_forgiven_before REAL"}},
          // Its restarts and job-killing failures over its life, counted
          // from the history kept so far (version 5 counted the failures of
          // these kinds among the recent ones it read back).
          {6,
           {"ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0",
            "UPDATE jobs SET"
            " restarts = (SELECT count(*) FROM restarts WHERE restarts.job = jobs.job),"
            " failures = (SELECT count(*) FROM failures WHERE failures.job = jobs.job"
            "   AND failures.kind IN ('crash', 'stall', 'node_lost'))"}},
      },
      Write,
      Read,
      // Jobs that ended before the cutoff; the tables listed after this one
      // prune what hangs off them first.
      {"DELETE FROM jobs WHERE changed < ?1 AND state IN ('finished', 'failed')"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
