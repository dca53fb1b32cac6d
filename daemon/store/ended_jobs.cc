// The ended_jobs table and its children ended_job_nodes and ended_job_ranks:
// what each ended job showed when it ended (journal.h: EndedJobRow). An
// ended_jobs row replaces the job's whole picture.
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateEndedJobs =
    "CREATE TABLE ended_jobs ("
    "  job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
    "  world_size INTEGER NOT NULL, heartbeats INTEGER NOT NULL, plans TEXT NOT NULL,"
    "  plan_checkpoint_seconds REAL, plan_mtbf_seconds REAL, plan_restart_seconds REAL,"
    "  plan_async_write_seconds REAL, plan_run_seconds REAL)";
constexpr const char* kAddSignals =
    "ALTER TABLE ended_jobs ADD COLUMN signals TEXT NOT NULL DEFAULT ''";
constexpr const char* kCreateEndedJobNodes =
    "CREATE TABLE ended_job_nodes ("
    "  job TEXT NOT NULL, node TEXT NOT NULL, generation INTEGER NOT NULL,"
    "  incarnation INTEGER NOT NULL, last_report REAL, heartbeats INTEGER NOT NULL,"
    "  launcher_state TEXT NOT NULL, launcher_pid INTEGER NOT NULL, exit_code INTEGER NOT NULL,"
    "  signal INTEGER NOT NULL, PRIMARY KEY (job, node)) WITHOUT ROWID";
constexpr const char* kCreateEndedJobRanks =
    "CREATE TABLE ended_job_ranks ("
    "  job TEXT NOT NULL, rank INTEGER NOT NULL, node TEXT NOT NULL,"
    "  local_rank INTEGER NOT NULL, pid INTEGER NOT NULL, step INTEGER NOT NULL,"
    "  last_heartbeat REAL, last_progress REAL, heartbeats INTEGER NOT NULL,"
    "  step_p50 REAL NOT NULL, step_p99 REAL NOT NULL, compute_p50 REAL NOT NULL,"
    "  compute_p99 REAL NOT NULL, phase TEXT NOT NULL, liveness TEXT NOT NULL, death_time REAL,"
    "  exit_known INTEGER NOT NULL, exit_code INTEGER NOT NULL, signal INTEGER NOT NULL,"
    "  exception_type TEXT NOT NULL, exception_message TEXT NOT NULL, loss REAL,"
    "  learning_rate REAL, samples INTEGER, datagrams_dropped INTEGER NOT NULL,"
    "  straggler INTEGER NOT NULL, PRIMARY KEY (job, rank)) WITHOUT ROWID";

// Plans as text, one a line: "plan_id anchor interval effective_from
// one_off...", and back; a line that does not read is skipped.
std::string JoinPlans(const std::vector<CheckpointPlanSpec>& plans) {
  std::vector<std::string> lines;
  for (const CheckpointPlanSpec& p : plans) {
    std::string line = absl::StrCat(p.plan_id, " ", p.anchor_step, " ", p.interval_steps, " ",
                                    p.effective_from_step);
    for (int64_t step : p.one_off_steps) absl::StrAppend(&line, " ", step);
    lines.push_back(std::move(line));
  }
  return absl::StrJoin(lines, "\n");
}

// Signals as text, one a line: "name value", and back; a line that does not
// read is skipped.
std::string JoinSignals(const std::vector<std::pair<std::string, double>>& signals) {
  std::vector<std::string> lines;
  for (const auto& [name, value] : signals) {
    lines.push_back(absl::StrFormat("%s %.17g", name, value));  // read back exactly
  }
  return absl::StrJoin(lines, "\n");
}

std::vector<std::pair<std::string, double>> SplitSignals(absl::string_view text) {
  std::vector<std::pair<std::string, double>> signals;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    double value = 0;
    if (fields.size() == 2 && absl::SimpleAtod(fields[1], &value)) {
      signals.emplace_back(std::string(fields[0]), value);
    }
  }
  return signals;
}

std::vector<CheckpointPlanSpec> SplitPlans(absl::string_view text) {
  std::vector<CheckpointPlanSpec> plans;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    CheckpointPlanSpec p;
    bool ok = fields.size() >= 4 && absl::SimpleAtoi(fields[0], &p.plan_id) &&
              absl::SimpleAtoi(fields[1], &p.anchor_step) &&
              absl::SimpleAtoi(fields[2], &p.interval_steps) &&
              absl::SimpleAtoi(fields[3], &p.effective_from_step);
    for (size_t i = 4; ok && i < fields.size(); ++i) {
      ok = absl::SimpleAtoi(fields[i], &p.one_off_steps.emplace_back());
    }
    if (ok) plans.push_back(std::move(p));
  }
  return plans;
}

void BindOptional(Statement& s, int i, const std::optional<double>& value) {
  if (value.has_value()) return s.BindDouble(i, *value);
  s.BindNull(i);
}

std::optional<double> OptionalDouble(Statement& row, int c) {
  if (row.IsNull(c)) return std::nullopt;
  return row.Double(c);
}

absl::Status WriteJobs(const Db& db, const Journal& journal) {
  if (journal.ended_jobs.empty()) return absl::OkStatus();
  Statement clear_nodes(db, "DELETE FROM ended_job_nodes WHERE job = ?1");
  Statement clear_ranks(db, "DELETE FROM ended_job_ranks WHERE job = ?1");
  Statement upsert(db,
                   "INSERT OR REPLACE INTO ended_jobs (job, generation, world_size, heartbeats,"
                   " plans, plan_checkpoint_seconds, plan_mtbf_seconds, plan_restart_seconds,"
                   " plan_async_write_seconds, plan_run_seconds, signals)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  for (const EndedJobRow& row : journal.ended_jobs) {
    for (Statement* clear : {&clear_nodes, &clear_ranks}) {
      clear->BindText(1, row.job);
      if (absl::Status s = clear->Run("writing the journal"); !s.ok()) return s;
    }
    upsert.BindText(1, row.job);
    upsert.BindUint(2, row.generation);
    upsert.BindInt(3, row.world_size);
    upsert.BindUint(4, row.heartbeats_received);
    upsert.BindText(5, JoinPlans(row.plans));
    const std::optional<CheckpointPlanInputs>& in = row.plan_inputs;
    BindOptional(upsert, 6, in ? std::optional<double>(in->checkpoint_seconds) : std::nullopt);
    BindOptional(upsert, 7, in ? std::optional<double>(in->mtbf_seconds) : std::nullopt);
    BindOptional(upsert, 8, in ? std::optional<double>(in->restart_seconds) : std::nullopt);
    BindOptional(upsert, 9, in ? std::optional<double>(in->async_write_seconds) : std::nullopt);
    BindOptional(upsert, 10, in ? in->run_seconds : std::nullopt);
    upsert.BindText(11, JoinSignals(row.signals));
    if (absl::Status s = upsert.Run("writing the journal"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Write(const Db& db, const Journal& journal) {
  // The jobs first: a job's row clears its picture before the rows of it.
  if (absl::Status s = WriteJobs(db, journal); !s.ok()) return s;
  absl::Status status = RunForEach(
      db,
      "INSERT OR REPLACE INTO ended_job_nodes (job, node, generation, incarnation, last_report,"
      " heartbeats, launcher_state, launcher_pid, exit_code, signal)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
      journal.ended_nodes, [](Statement& s, const EndedNodeRow& row) {
        s.BindText(1, row.job);
        s.BindText(2, row.node);
        s.BindUint(3, row.generation);
        s.BindUint(4, row.incarnation);
        s.BindTime(5, row.last_report);
        s.BindUint(6, row.heartbeats_received);
        s.BindText(7, row.launcher_state);
        s.BindInt(8, row.launcher_pid);
        s.BindInt(9, row.exit_code);
        s.BindInt(10, row.signal);
      });
  if (!status.ok()) return status;
  return RunForEach(
      db,
      "INSERT OR REPLACE INTO ended_job_ranks (job, rank, node, local_rank, pid, step,"
      " last_heartbeat, last_progress, heartbeats, step_p50, step_p99, compute_p50, compute_p99,"
      " phase, liveness, death_time, exit_known, exit_code, signal, exception_type,"
      " exception_message, loss, learning_rate, samples, datagrams_dropped, straggler)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
      " ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)",
      journal.ended_ranks, [](Statement& s, const EndedRankRow& row) {
        s.BindText(1, row.job);
        s.BindInt(2, row.rank);
        s.BindText(3, row.node);
        s.BindInt(4, row.local_rank);
        s.BindInt(5, row.pid);
        s.BindInt(6, row.step);
        s.BindTime(7, row.last_heartbeat);
        s.BindTime(8, row.last_progress);
        s.BindUint(9, row.heartbeats);
        s.BindDouble(10, row.step_p50);
        s.BindDouble(11, row.step_p99);
        s.BindDouble(12, row.compute_p50);
        s.BindDouble(13, row.compute_p99);
        s.BindText(14, row.phase);
        s.BindText(15, row.liveness);
        s.BindTime(16, row.death_time);
        s.BindBool(17, row.exit_known);
        s.BindInt(18, row.exit_code);
        s.BindInt(19, row.signal);
        s.BindText(20, row.exception_type);
        s.BindText(21, row.exception_message);
        BindOptional(s, 22, row.loss);
        BindOptional(s, 23, row.learning_rate);
        if (row.samples.has_value()) {
          s.BindUint(24, *row.samples);
        } else {
          s.BindNull(24);
        }
        s.BindUint(25, row.datagrams_dropped);
        s.BindBool(26, row.straggler);
      });
}

// A figure that cannot be NaN: 0 for a NULL (what a NaN was stored as).
double Figure(Statement& row, int c) { return row.IsNull(c) ? 0 : row.Double(c); }

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement jobs(db,
                 "SELECT job, generation, world_size, heartbeats, plans, plan_checkpoint_seconds,"
                 " plan_mtbf_seconds, plan_restart_seconds, plan_async_write_seconds,"
                 " plan_run_seconds, signals FROM ended_jobs ORDER BY job");
  absl::Status status = ForEachRow(db, jobs, [&](Statement& row) {
    EndedJobRow& job = state->ended_jobs.emplace_back();
    job.job = row.Text(0);
    job.generation = row.Uint(1);
    job.world_size = static_cast<uint32_t>(row.Int(2));
    job.heartbeats_received = row.Uint(3);
    job.plans = SplitPlans(row.Text(4));
    if (!row.IsNull(5)) {
      CheckpointPlanInputs& in = job.plan_inputs.emplace();
      in.checkpoint_seconds = Figure(row, 5);
      in.mtbf_seconds = Figure(row, 6);
      in.restart_seconds = Figure(row, 7);
      in.async_write_seconds = Figure(row, 8);
      in.run_seconds = OptionalDouble(row, 9);
    }
    job.signals = SplitSignals(row.Text(10));
  });
  if (!status.ok()) return status;
  Statement nodes(db,
                  "SELECT job, node, generation, incarnation, last_report, heartbeats,"
                  " launcher_state, launcher_pid, exit_code, signal FROM ended_job_nodes"
                  " ORDER BY job, node");
  status = ForEachRow(db, nodes, [&](Statement& row) {
    EndedNodeRow& node = state->ended_nodes.emplace_back();
    node.job = row.Text(0);
    node.node = row.Text(1);
    node.generation = row.Uint(2);
    node.incarnation = row.Uint(3);
    node.last_report = row.Time(4);
    node.heartbeats_received = row.Uint(5);
    node.launcher_state = row.Text(6);
    node.launcher_pid = static_cast<uint32_t>(row.Int(7));
    node.exit_code = static_cast<int32_t>(row.Int(8));
    node.signal = static_cast<int32_t>(row.Int(9));
  });
  if (!status.ok()) return status;
  Statement ranks(db,
                  "SELECT job, rank, node, local_rank, pid, step, last_heartbeat, last_progress,"
                  " heartbeats, step_p50, step_p99, compute_p50, compute_p99, phase, liveness,"
                  " death_time, exit_known, exit_code, signal, exception_type, exception_message,"
                  " loss, learning_rate, samples, datagrams_dropped, straggler"
                  " FROM ended_job_ranks ORDER BY job, rank");
  return ForEachRow(db, ranks, [&](Statement& row) {
    EndedRankRow& r = state->ended_ranks.emplace_back();
    r.job = row.Text(0);
    r.rank = static_cast<uint32_t>(row.Int(1));
    r.node = row.Text(2);
    r.local_rank = static_cast<uint32_t>(row.Int(3));
    r.pid = static_cast<uint32_t>(row.Int(4));
    r.step = row.Int(5);
    r.last_heartbeat = row.Time(6);
    r.last_progress = row.Time(7);
    r.heartbeats = row.Uint(8);
    r.step_p50 = Figure(row, 9);
    r.step_p99 = Figure(row, 10);
    r.compute_p50 = Figure(row, 11);
    r.compute_p99 = Figure(row, 12);
    r.phase = row.Text(13);
    r.liveness = row.Text(14);
    r.death_time = row.Time(15);
    r.exit_known = row.Bool(16);
    r.exit_code = static_cast<int32_t>(row.Int(17));
    r.signal = static_cast<int32_t>(row.Int(18));
    r.exception_type = row.Text(19);
    r.exception_message = row.Text(20);
    r.loss = OptionalDouble(row, 21);
    r.learning_rate = OptionalDouble(row, 22);
    if (!row.IsNull(23)) r.samples = row.Uint(23);
    r.datagrams_dropped = row.Uint(24);
    r.straggler = row.Bool(25);
  });
}

}  // namespace

const TableCodec& EndedJobsTable() {
  static const TableCodec* const kCodec = new TableCodec{
      // As a migrated store has it: the signals column last.
      {kCreateEndedJobs, kAddSignals, kCreateEndedJobNodes, kCreateEndedJobRanks},
      {
          // What an ended job showed, for after a restart.
          {6, {kCreateEndedJobs, kCreateEndedJobNodes, kCreateEndedJobRanks}},
          // Its training signals too.
          {9, {kAddSignals}},
      },
      Write,
      Read,
      // The pictures of the jobs the jobs table is about to prune.
      {"DELETE FROM ended_job_ranks WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
       " state IN ('finished', 'failed'))",
       "DELETE FROM ended_job_nodes WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
       " state IN ('finished', 'failed'))",
       "DELETE FROM ended_jobs WHERE job IN (SELECT job FROM jobs WHERE changed < ?1 AND"
       " state IN ('finished', 'failed'))"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
