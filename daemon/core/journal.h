#ifndef TRAINSUP_DAEMON_CORE_JOURNAL_H_
#define TRAINSUP_DAEMON_CORE_JOURNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "calc/checkpoint_planner.h"
#include "daemon/core/checkpoint_fallback.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/event_log.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/kill_criteria.h"

namespace trainsup {

// What the supervisor must not forget across its own restarts, as plain
// records. The core appends them to a Journal as it decides; the driver
// writes each Journal to the state store (SQLite) before acting on it, and
// feeds the stored records back through Supervisor::Restore at start-up.

// A node's quarantine state (the latest record of a node wins).
struct NodeRecordRow {
  std::string name;
  bool quarantined = false;
  std::string reason;  // why it was quarantined (or unquarantined)
  absl::Time changed = absl::InfinitePast();
  std::string changed_by;  // "policy" or "operator"
};

// A failure attributed to a node: what the quarantine policy counts, and
// (later) what the MTBF estimate counts.
struct FailureRow {
  absl::Time time = absl::InfinitePast();
  std::string job;
  uint64_t generation = 0;
  // "crash", "stall", "node_lost", "straggler", "gpu_uncorrectable", or "restart_elsewhere" (a
  // crash the job's own verdict said to restart elsewhere).
  std::string kind;
  std::string node;  // where it happened; empty: nowhere known
  std::optional<uint32_t> rank;
  std::string message;
  // It counts toward the node's quarantine.
  bool charged = true;
};

// A coordinated restart: the job moved from one generation to the next.
struct RestartRow {
  absl::Time time = absl::InfinitePast();
  std::string job;
  uint64_t from_generation = 0;
  uint64_t to_generation = 0;
  std::string reason;
};

// A job's lifecycle state (the latest record of a job wins).
struct JobRow {
  std::string job;
  uint64_t generation = 0;
  std::string state;   // JobStateName()
  std::string reason;  // why it is in that state
  uint32_t world_size = 0;
  absl::Time changed = absl::InfinitePast();
  // Seconds the job has spent running, across generations (MTBF exposure).
  double exposure_seconds = 0;
  // Restarts before this time no longer count towards the restart cap (an
  // operator resumed the job then); InfinitePast(): never resumed.
  absl::Time restarts_forgiven_before = absl::InfinitePast();
  // Coordinated restarts of the job, and its job-killing failures (what its
  // MTBF counts), over its whole life.
  uint64_t restarts = 0;
  uint64_t failures = 0;
};

// What a job measured, kept across the supervisor's restarts: its goodput
// ledger and the recent costs the checkpoint planner uses (the latest row of
// a job wins).
struct JobMeasuresRow {
  std::string job;
  LedgerState ledger;
  std::vector<double> checkpoint_costs;  // blocking seconds, oldest first
  std::vector<double> checkpoint_async;  // background write seconds
  std::vector<double> restart_costs;     // failure -> first step of the next generation
};

// One rank's Python stack from a hung generation (see stacks.h).
struct StackRow {
  std::string job;
  uint64_t generation = 0;
  uint64_t event_id = 0;
  absl::Time time = absl::InfinitePast();
  double collect_seconds = 0;
  std::optional<uint32_t> culprit;
  uint32_t rank = 0;
  std::string node;
  bool answered = false;
  std::string text;
};

// What an ended job (finished or failed) showed when it ended, for the facts
// no agent sends again once the supervisor restarts: its totals and plans
// (EndedJobRow), each of its nodes (EndedNodeRow) and ranks (EndedRankRow)
// as last seen. Journaled when the job ends, where an EndedJobRow replaces
// the job's whole picture before it; a node and its ranks again when the
// node's agent leaves after the end (the latest row of a node or rank of a
// job wins).
struct EndedJobRow {
  std::string job;
  uint64_t generation = 0;
  uint32_t world_size = 0;
  uint64_t heartbeats_received = 0;  // over the job's life
  std::vector<CheckpointPlanSpec> plans;
  // What the planner's figures behind the last periodic plan were made from.
  std::optional<CheckpointPlanInputs> plan_inputs;
  // Its training signals' state by name (SignalMonitor::State()).
  std::vector<std::pair<std::string, double>> signals;
};

struct EndedNodeRow {
  std::string job;
  std::string node;
  uint64_t generation = 0;
  uint64_t incarnation = 0;
  absl::Time last_report = absl::InfinitePast();
  uint64_t heartbeats_received = 0;
  std::string launcher_state;  // LauncherStateName()
  uint32_t launcher_pid = 0;
  int32_t exit_code = 0;
  int32_t signal = 0;
};

struct EndedRankRow {
  std::string job;
  uint32_t rank = 0;
  std::string node;
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  int64_t step = -1;
  absl::Time last_heartbeat = absl::InfinitePast();
  absl::Time last_progress = absl::InfinitePast();
  uint64_t heartbeats = 0;
  // The percentiles of its step and compute windows (0: no sample).
  double step_p50 = 0;
  double step_p99 = 0;
  double compute_p50 = 0;
  double compute_p99 = 0;
  std::string phase;     // StepPhaseName()
  std::string liveness;  // LivenessName()
  // How its process ended; death_time InfinitePast(): not seen to end.
  absl::Time death_time = absl::InfinitePast();
  bool exit_known = false;
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string exception_type;
  std::string exception_message;
  std::optional<double> loss;
  std::optional<double> learning_rate;
  std::optional<uint64_t> samples;
  uint64_t datagrams_dropped = 0;
  bool straggler = false;
};

// What a fence command tells the cluster scheduler about a node: to stop
// placing work on it (--fence-command, at a quarantine) or to take it back
// (--unfence-command, when an operator lifts the quarantine).
enum class FenceAction { kFence, kUnfence };

// "fence" or "unfence": the name in the store, in events and in metrics.
inline absl::string_view FenceActionName(FenceAction action) {
  return action == FenceAction::kUnfence ? "unfence" : "fence";
}

// A fence (or unfence) the supervisor decided and has not seen succeed yet.
// It is written (pending) before the command runs, and cleared when the
// command succeeded or the node no longer needs it; a pending one is run
// again after the supervisor restarts, so the commands must be idempotent.
// A node has at most one: the latest decided replaces the one before.
struct FenceRow {
  std::string node;
  std::string reason;
  absl::Time decided = absl::InfinitePast();
  bool pending = true;  // false: clear the node's row
  FenceAction action = FenceAction::kFence;
};

// Which checkpoint a job's generations must load, and what it found
// suspect (checkpoint_fallback.h; the latest row of a job wins).
struct FallbackRow {
  std::string job;
  FallbackState state;
};

// A job's kill criteria from one source ("script" or "operator"): set, or
// cleared (no spec). The latest row of a job and source wins.
struct KillCriteriaRow {
  std::string job;
  std::string source;
  std::optional<KillCriteriaSpec> spec;  // none: cleared
  absl::Time changed = absl::InfinitePast();
};

struct Journal {
  std::vector<NodeRecordRow> nodes;
  std::vector<FailureRow> failures;
  std::vector<RestartRow> restarts;
  std::vector<JobRow> jobs;
  std::vector<JobMeasuresRow> measures;
  std::vector<Event> events;
  std::vector<StackRow> stacks;
  std::vector<FenceRow> fences;
  std::vector<EndedJobRow> ended_jobs;
  std::vector<EndedNodeRow> ended_nodes;
  std::vector<EndedRankRow> ended_ranks;
  std::vector<FallbackRow> fallbacks;
  std::vector<KillCriteriaRow> kill_criteria;

  bool empty() const {
    return nodes.empty() && failures.empty() && restarts.empty() && jobs.empty() &&
           measures.empty() && events.empty() && stacks.empty() && fences.empty() &&
           ended_jobs.empty() && ended_nodes.empty() && ended_ranks.empty() &&
           fallbacks.empty() && kill_criteria.empty();
  }
};

// How many events of one kind the store holds about a job.
struct EventCountRow {
  std::string job;
  EventKind kind = EventKind::kStall;
  uint64_t count = 0;
};

// Everything the store gives back at start-up: the same row types (for
// nodes, jobs and ended jobs' pictures only the latest row of each; only
// the fences still pending), and the count of every event it holds by job
// and kind (the events themselves only the most recent).
struct PersistedState : Journal {
  std::vector<EventCountRow> event_counts;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOURNAL_H_
