// The checkpoint_fallbacks table: which checkpoint a job's generations must
// load, and what it found suspect (checkpoint_fallback.h), the latest of a
// job.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateFallbacks =
    "CREATE TABLE checkpoint_fallbacks ("
    "  job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL, first_step INTEGER NOT NULL,"
    "  checkpoints TEXT NOT NULL, suspects TEXT NOT NULL,"
    "  failure_generation INTEGER, failure_checkpoint INTEGER,"
    "  resume_limit INTEGER, skip_first INTEGER, skip_last INTEGER,"
    "  advice_generation INTEGER NOT NULL, rollbacks INTEGER NOT NULL,"
    "  spike_rollbacks INTEGER NOT NULL)";

// Steps as text ("9 19 29"), and back; unreadable items are skipped.
std::string JoinSteps(const std::vector<int64_t>& steps) { return absl::StrJoin(steps, " "); }
std::vector<int64_t> SplitSteps(absl::string_view text) {
  std::vector<int64_t> steps;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    int64_t step = 0;
    if (absl::SimpleAtoi(item, &step)) steps.push_back(step);
  }
  return steps;
}

void BindStep(Statement& statement, int i, const std::optional<int64_t>& step) {
  if (!step) return statement.BindNull(i);
  statement.BindInt(i, *step);
}
std::optional<int64_t> StepAt(Statement& row, int c) {
  if (row.IsNull(c)) return std::nullopt;
  return row.Int(c);
}

absl::Status Write(const Db& db, const Journal& journal) {
  if (journal.fallbacks.empty()) return absl::OkStatus();
  Statement upsert(db,
                   "INSERT OR REPLACE INTO checkpoint_fallbacks (job, generation, first_step,"
                   " checkpoints, suspects, failure_generation, failure_checkpoint, resume_limit,"
                   " skip_first, skip_last, advice_generation, rollbacks, spike_rollbacks)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  for (const FallbackRow& row : journal.fallbacks) {
    const FallbackState& s = row.state;
    upsert.BindText(1, row.job);
    upsert.BindUint(2, s.generation);
    upsert.BindInt(3, s.first_step);
    upsert.BindText(4, JoinSteps(s.checkpoints));
    upsert.BindText(5, JoinSteps(s.suspects));
    if (s.last_load_failure) {
      upsert.BindUint(6, s.last_load_failure->generation);
      upsert.BindInt(7, s.last_load_failure->checkpoint);
    } else {
      upsert.BindNull(6);
      upsert.BindNull(7);
    }
    BindStep(upsert, 8, s.advice.limit);
    BindStep(upsert, 9, s.advice.skip_first);
    BindStep(upsert, 10, s.advice.skip_last);
    upsert.BindUint(11, s.advice_generation);
    upsert.BindInt(12, s.rollbacks);
    upsert.BindInt(13, s.spike_rollbacks);
    if (absl::Status st = upsert.Run("writing the journal"); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT job, generation, first_step, checkpoints, suspects, failure_generation,"
                   " failure_checkpoint, resume_limit, skip_first, skip_last, advice_generation,"
                   " rollbacks, spike_rollbacks FROM checkpoint_fallbacks ORDER BY job");
  return ForEachRow(db, select, [&](Statement& row) {
    FallbackRow& out = state->fallbacks.emplace_back();
    out.job = row.Text(0);
    FallbackState& s = out.state;
    s.generation = row.Uint(1);
    s.first_step = row.Int(2);
    s.checkpoints = SplitSteps(row.Text(3));
    s.suspects = SplitSteps(row.Text(4));
    if (!row.IsNull(5) && !row.IsNull(6)) s.last_load_failure = LoadFailure{row.Uint(5), row.Int(6)};
    s.advice.limit = StepAt(row, 7);
    s.advice.skip_first = StepAt(row, 8);
    s.advice.skip_last = StepAt(row, 9);
    if (!s.advice.skip_first || !s.advice.skip_last) {
      s.advice.skip_first.reset();
      s.advice.skip_last.reset();
    }
    s.advice_generation = row.Uint(10);
    s.rollbacks = static_cast<int>(row.Int(11));
    s.spike_rollbacks = static_cast<int>(row.Int(12));
  });
}

}  // namespace

const TableCodec& FallbacksTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {kCreateFallbacks},
      {
          // Which checkpoint a job's generations load (bad checkpoints,
          // spike rollback).
          {7, {kCreateFallbacks}},
      },
      Write,
      Read,
      // The rows of the jobs the jobs table is about to prune.
      {"DELETE FROM checkpoint_fallbacks WHERE job IN (SELECT job FROM jobs WHERE changed < ?1"
       " AND state IN ('finished', 'failed'))"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
