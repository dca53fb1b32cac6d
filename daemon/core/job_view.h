#ifndef TRAINSUP_DAEMON_CORE_JOB_VIEW_H_
#define TRAINSUP_DAEMON_CORE_JOB_VIEW_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/event_log.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_costs.h"
#include "daemon/core/job_state.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/journal.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/stacks.h"

// The read model: what the adapters (the metrics collector, the operator
// snapshot and through it the CLI and `top`) render, as plain values. The
// core fills them (read_model.h) from what it observed and what its rules
// decided, most of it at the sweep; an adapter renders them and never
// recomputes a figure or calls a rule. A new rule's verdict reaches every
// reader as a new field here.

namespace trainsup {

// The ranks heard from in the current generation, by liveness. A rank that
// exited 0 in a job that finished counts as finished, not dead.
struct RankCounts {
  uint32_t alive = 0;
  uint32_t dead = 0;
  uint32_t unknown = 0;
  uint32_t finished = 0;
};

// A rank flagged as a straggler.
struct StragglerView {
  uint32_t rank = 0;
  double compute_p99_s = 0;  // its p99 compute time now
};

// The figures of the last checkpoint plan the planner made for a job.
struct PlanFigures {
  double young_interval_s = 0;
  double daly_interval_s = 0;
  double interval_s = 0;  // the planned one
  double expected_waste_fraction = 0;
  std::string verdict;  // one line for a human
  std::vector<std::string> warnings;
};

// One job.
// What the job's training-signal rules show (docs/signals.md).
struct SignalsView {
  // At the job's last step: the mean of its ranks' finite losses, the
  // largest finite gradient norm (absent when none was sent).
  std::optional<double> loss;
  std::optional<double> grad_norm;
  // Across the job's generations: steps with a non-finite loss, overflow
  // steps (a non-finite gradient norm with finite losses), ranks x steps that
  // disagreed with their replica group.
  uint64_t nonfinite_loss_steps = 0;
  uint64_t overflow_steps = 0;
  uint64_t replica_mismatches = 0;
  // Resume verification: findings by check (resumed_behind, lr_mismatch,
  // data_position_mismatch, resume_spike) and the steps re-done behind the
  // last checkpoint; the step of the checkpoint last seen complete (-1: none).
  std::vector<std::pair<std::string, uint64_t>> resume_findings;
  uint64_t resume_repeated_steps = 0;
  int64_t last_checkpoint_step = -1;
  bool loss_shifted = false;  // the loss holds a level shift now
  // The registry's rules' state as named gauges (SignalRule::Gauges; in the
  // registry's order): loss_flat, step_time_ratio,
  // device_memory_growth_bytes_per_second, ... (docs/signals.md).
  std::vector<std::pair<std::string, double>> gauges;
  // The largest rank's device memory and host RSS at the last step, bytes
  // (absent when not sent).
  std::optional<double> device_memory_bytes;
  std::optional<double> host_memory_bytes;
};

struct JobView {
  std::string id;

  // What was observed of its current generation.
  uint64_t generation = 0;
  uint32_t world_size = 0;
  uint32_t ranks_reporting = 0;
  uint32_t ranks_alive = 0;  // rank processes the agents report alive
  RankCounts seen;           // the ranks reporting, by liveness
  int64_t step = -1;         // the highest completed
  absl::Time last_progress = absl::InfinitePast();
  uint64_t heartbeats_received = 0;
  uint64_t datagrams_dropped = 0;
  uint32_t nodes = 0;  // nodes whose agent speaks for the job
  // Of those, the ones connected and heard now (AgentRegistry::AgentsWaiting).
  uint32_t agents_waiting = 0;

  // What the rules decided about the generation. The step statistics and
  // the stall threshold are the last sweep's (first taken when the
  // generation began to run).
  JobStepStats step_stats;
  // Absent while the stall rule does not judge: no rank reports, or one ended.
  std::optional<absl::Duration> stall_threshold;
  bool stalled = false;
  // The rank a stalled job is held up by, and its node; absent unless the
  // job is stalled and a rank was named.
  std::optional<uint32_t> stall_culprit;
  std::string stall_culprit_node;
  std::optional<uint32_t> crash_culprit;  // the rank a crash was laid on
  std::vector<StragglerView> stragglers;  // flagged now, by rank

  // Where the supervisor has taken it.
  JobState state = JobState::kPending;
  std::string state_reason;
  absl::Time state_since = absl::InfinitePast();
  uint64_t restarts = 0;
  // Restarting: when the next generation starts.
  absl::Time restart_at = absl::InfinitePast();
  // The last job-killing failure recorded since this supervisor started,
  // as the state store keeps it: its kind, culprit and node, and whether it
  // was charged to the node (the node's fault) or not (the training code's,
  // or the job's own verdict's).
  std::optional<FailureRow> last_failure;
  // Where its next generation is told to resume (checkpoint_fallback.h):
  // the limit in force, and for people ("the next generation loads the
  // newest checkpoint at or below step 59 (step 59)"); empty: as it likes.
  std::optional<int64_t> resume_limit;
  std::string resume_advice;

  // Its costs, failure rate, checkpoint plans and goodput.
  MtbfEstimate mtbf;
  CostFigure checkpoint_cost;  // C
  CostFigure restart_cost;     // R
  double checkpoint_async_s = 0;
  std::optional<PlanFigures> plan;        // absent before the first plan
  std::vector<CheckpointPlanSpec> plans;  // as the ranks hold them, oldest first
  // The next step any plan makes a checkpoint step; -1 when none.
  int64_t next_checkpoint_step = -1;
  LedgerTotals ledger;
  std::map<uint64_t, LedgerTotals> ledger_by_generation;
  // Events about the job, by kind, across generations.
  std::array<uint64_t, kEventKindCount> events{};
  SignalsView signals;
  // How close each kill criterion in force is to firing (kill_criteria.h).
  std::vector<CriterionStatus> kill_criteria;
};

// One rank as operators see it, packed: a 100k-rank job's are copied under
// the core's lock at each operator snapshot, so they hold numbers only; the
// rare texts (exit, exception) sit apart (RankTexts).
struct RankView {
  uint32_t rank = 0;
  NodeIndex node = kNoNode;  // into the supervisor's node table (NodeViews)
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  int64_t step = -1;
  absl::Time last_heartbeat = absl::InfinitePast();
  uint64_t heartbeats = 0;
  uint64_t datagrams_dropped = 0;
  float step_p50 = 0;
  float step_p99 = 0;
  float compute_p50 = 0;
  float compute_p99 = 0;
  // Of its step time (step_shares.h): waiting for data (recent), and
  // outside compute and data wait (the collective; steady, over about 70
  // steps) with that share's trend (recent minus steady; > 0 rising). The
  // last two only with has_comm_share (the rank measures its compute).
  float data_wait_share = 0;
  float comm_share = 0;
  float comm_share_trend = 0;
  double loss = 0;
  double learning_rate = 0;
  uint32_t texts = UINT32_MAX;  // index into the job's RankTexts, if any
  StepPhase phase = StepPhase::kBetweenSteps;
  Liveness liveness = Liveness::kUnknown;  // kFinished: exited 0, its job finished
  bool has_loss = false;
  bool has_learning_rate = false;
  bool has_step_samples = false;     // the step percentiles are of samples
  bool has_compute_samples = false;  // the compute percentiles are of samples
  bool has_step_shares = false;      // data_wait_share is of steps
  bool has_comm_share = false;
  bool straggler = false;
  bool stall_culprit = false;  // only while the job is stalled
  bool crash_culprit = false;
};

// The exit and exception of a rank that ended.
struct RankTexts {
  std::string exit;
  std::string exception;
};

// One node.
struct NodeView {
  std::string name;
  std::string job;
  std::string quarantine_reason;
  std::string last_gpu_error;  // "" when none (NodeRecord's)
  absl::Time last_gpu_error_at = absl::InfinitePast();
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  uint64_t heartbeats = 0;
  absl::Time last_report = absl::InfinitePast();
  uint32_t ranks = 0;  // ranks of its job that reported from it
  LauncherState launcher = LauncherState::kUnspecified;
  bool connected = false;
  bool quarantined = false;
  bool unreachable = false;
};

// What the rules say about the cluster as a whole.
struct ClusterView {
  uint32_t nodes = 0;  // nodes heard of (and not forgotten)
  MtbfEstimate mtbf;   // over every job's exposure and failures
  uint32_t nodes_quarantined = 0;
  // Quarantines the policy decided but --quarantine-max-fraction refused.
  uint64_t quarantine_skipped = 0;
  // The nodes quarantined, and those unreachable, in the order first heard of.
  std::vector<std::string> quarantined_nodes;
  std::vector<std::string> unreachable_nodes;
  // The job's own verdicts acted on since start, one per (action, source),
  // zeros included, named as the metric labels them ("restart_elsewhere",
  // "exit_code").
  struct VerdictCount {
    std::string action;
    std::string source;
    uint64_t count = 0;
  };
  std::vector<VerdictCount> verdicts_acted;
  // Commands that failed before any rank reported, since start, by whose
  // they were judged: their node's, the workload's, or not yet (a first).
  uint64_t early_failures_node = 0;
  uint64_t early_failures_workload = 0;
  uint64_t early_failures_undecided = 0;
};

// The Python stacks of one hung generation of a job, grouped.
struct StacksView {
  uint64_t generation = 0;
  uint64_t event_id = 0;  // the stall (or node_lost) event they belong to
  absl::Time time = absl::InfinitePast();
  double collect_seconds = 0;
  std::vector<StackGroup> groups;    // the smallest group first
  std::vector<uint32_t> unanswered;  // ranks that wrote no stack in time
  // The ranks' NCCL flight records: how many, and what they say (kNoDumps
  // when none).
  size_t flight_records = 0;
  CollectiveCulprit collective;
  std::map<uint32_t, std::string> unread_dumps;  // rank -> why its dump was not read
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_VIEW_H_
