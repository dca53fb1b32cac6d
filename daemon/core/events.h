#ifndef TRAINSUP_DAEMON_CORE_EVENTS_H_
#define TRAINSUP_DAEMON_CORE_EVENTS_H_

// One constructor per event kind (common/event_kinds.h: EventKind). Each takes what
// the kind is about as typed values, fills the event's kind, job,
// generation, node, rank and figures from them, and makes the message for
// people from those same values: every number a message states is one of
// its figures, its generation or its rank (a list of ranks or nodes is
// counted), so the message, `-o json` and the state store never disagree.
// Text from elsewhere (a state's or an operator's reason, the quarantine
// policy's, a fence command's status and output, an exception) is quoted as
// given. docs/detection.md lists each kind's figures.
//
// A kind with more than one cause has one constructor per cause: a crash's
// verdict (CrashEvent) or a stall (NodeLostInStallEvent) for node_lost, and
// the checkpoint plan's three sources.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/crash_detector.h"
#include "daemon/core/early_failure.h"
#include "daemon/core/event_log.h"
#include "daemon/core/gpu_health.h"
#include "daemon/core/job.h"
#include "daemon/core/job_state.h"
#include "daemon/core/journal.h"
#include "daemon/core/kill_criteria.h"
#include "daemon/core/recovery_timer.h"
#include "daemon/core/signals/grad_norm_rule.h"
#include "daemon/core/signals/loss_flat_rule.h"
#include "daemon/core/signals/loss_shift_rule.h"
#include "daemon/core/signals/memory_growth_rule.h"
#include "daemon/core/signals/non_finite_rule.h"
#include "daemon/core/signals/replica_rule.h"
#include "daemon/core/signals/resume_rule.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/throughput_rule.h"
#include "daemon/core/checkpoint_fallback.h"
#include "daemon/core/rendezvous.h"
#include "daemon/core/stall_detector.h"
#include "daemon/core/straggler_detector.h"
#include "daemon/core/verdicts.h"

namespace trainsup {


// ---- Detection ----

// kStall: `verdict` on a job whose furthest rank is at `step`, and the
// rank `culprit` names (on `culprit_node`), or why it names none.
Event StallEvent(absl::Time time, const EventJob& job, const StallVerdict& verdict, int64_t step,
                 const Culprit& culprit, const std::string& culprit_node);

// kNodeLost, by the stall rule: the job stalled (`verdict`, at `step`) and
// only `node`'s `ranks`, unheard for `unheard`, can be why.
Event NodeLostInStallEvent(absl::Time time, const EventJob& job, const StallVerdict& verdict,
                           int64_t step, const std::string& node, absl::Duration unheard,
                           const std::vector<uint32_t>& ranks);

// kCrash for a kRank, kNoCulprit or kLauncher verdict; kNodeLost for a
// kNodeLost one. `node`: the verdict's node; `observed`: the job the verdict
// was given on (the named ranks' failures, the ranks reporting).
// `workload_hold`: for a rank's crash, why it is the training code's own
// failure when it is (failure_classifier.h: WorkloadRepeat), quoted at the
// end.
Event CrashEvent(absl::Time time, const EventJob& job, const CrashVerdict& verdict,
                 const std::string& node, const Job& observed,
                 const std::optional<std::string>& workload_hold);

// An early failure (early_failure.h) as the crash event tells it: how many
// of the nodes that ran the generation failed early, and the judgement.
struct JudgedEarlyFailure {
  EarlyFailure failure;
  EarlyJudgement judgement;
  size_t failed = 0;  // nodes of the generation whose command failed early
  size_t ran = 0;     // nodes that ran the generation
};
// kCrash for a kLauncher verdict whose command failed before any rank
// reported (`early`); `death` dates it and says how the command ended.
Event EarlyCrashEvent(absl::Time time, const EventJob& job, const std::string& node,
                      const RankDeath& death, const JudgedEarlyFailure& early);

// What is done about a verdict, for its event.
struct VerdictTaken {
  std::string text;  // "node-b is left out of generation 3 ...", "the job is held"
  bool acted = true;  // false under --observe-only
  // restart-elsewhere: the node's verdicts of the kind within the
  // quarantine window (this one included), and whether it is quarantined.
  int on_node = 0;
  bool quarantined = false;
};
// kVerdict: the job's own `verdict` on `failure` ("crash of rank 3 (exit
// code 16)") of `rank` on `node`; `exit_code`: the rank's, when known.
Event VerdictEvent(absl::Time time, const EventJob& job, std::optional<uint32_t> rank,
                   const std::string& node, const std::string& failure, const Verdict& verdict,
                   std::optional<int32_t> exit_code, const VerdictTaken& taken);

// kStraggler, or kStragglerCleared: `change` of a rank on `node`, judged
// with `options`; a straggler whose GPU runs slowed (`slowed_gpu`) says so.
Event StragglerEvent(absl::Time time, const EventJob& job, const StragglerChange& change,
                     const std::string& node, const StragglerOptions& options,
                     const GpuHealthState* slowed_gpu = nullptr);

// kStartTimeout: the generation started `waited` ago made no first step
// within `timeout`, and no rank of it reported, on `nodes_running` nodes
// whose command runs it; `rendezvous`: where it was to meet, if decided.
Event StartTimeoutEvent(absl::Time time, const EventJob& job, absl::Duration waited,
                        absl::Duration timeout, int nodes_running,
                        const RendezvousDecision* rendezvous);

// kNodeUnreachable: `node`'s agent unheard for `unheard`, past `lost_after`;
// its `ranks` are of unknown liveness.
Event NodeUnreachableEvent(absl::Time time, const EventJob& job, const std::string& node,
                           absl::Duration unheard, absl::Duration lost_after,
                           const std::vector<uint32_t>& ranks);

// kNodeReachable: `node`'s agent heard again after `silent`.
Event NodeReachableEvent(absl::Time time, const EventJob& job, const std::string& node,
                         absl::Duration silent);

// kStacks: `node` sent the Python stacks of `ranks` ranks (`answered` of
// them answered), collected in `collect_seconds`.
Event StacksEvent(absl::Time time, const EventJob& job, const std::string& node, int ranks,
                  int answered, double collect_seconds);

// ---- Training signals (docs/signals.md) ----

// kNotFinite: `f`, its first ranks on `nodes` (their names, in f.ranks'
// order). `restart`: the generation is stopped everywhere and restarted for
// it, from the newest checkpoint at or below `resume_limit` when set (one
// committed after the NaN may hold it); `workload_hold`: held instead, the
// same failure as the last generation's (failure_classifier.h:
// WorkloadRepeat), quoted.
Event NotFiniteEvent(absl::Time time, const EventJob& job, const NonFiniteFinding& f,
                     const std::vector<std::string>& nodes, bool restart,
                     const std::optional<std::string>& workload_hold,
                     std::optional<int64_t> resume_limit = std::nullopt);

// kLossShift: the job's loss (the mean over its ranks) shifted (`f`).
Event LossShiftEvent(absl::Time time, const EventJob& job, const LossShiftFinding& f,
                     const LossShiftOptions& options);

// kLossFlat: the job's loss did not go down over the generation's first
// steps (`f`), by at least `min_drop`.
Event LossFlatEvent(absl::Time time, const EventJob& job, const LossFlatFinding& f,
                    double min_drop);

// kGradSpike or kGradCollapse: `f`, its rank on `node`.
Event GradNormEvent(absl::Time time, const EventJob& job, const GradNormFinding& f,
                    const std::string& node);

// kThroughputChange or kThroughputDecay: `signal`, naming `node` (its
// node's name, or empty).
Event ThroughputEvent(absl::Time time, const EventJob& job, const ThroughputSignal& signal,
                      const std::string& node);

// kMemoryGrowth: `f`, its rank on `node`.
Event MemoryGrowthEvent(absl::Time time, const EventJob& job, const MemoryGrowthFinding& f,
                        const std::string& node);

// kReplicaMismatch: `f`, its rank on `node` (none named without a
// majority); `charged`: counted against the node toward its quarantine.
Event ReplicaMismatchEvent(absl::Time time, const EventJob& job, const ReplicaFinding& f,
                           const std::string& node, bool charged);

// What a generation's first steps showed of its resume (docs/signals.md,
// "Resume"). kResumedBehind: `f`.
Event ResumedBehindEvent(absl::Time time, const EventJob& job, const ResumeBehindFinding& f);
// kLrMismatch: `f`, judged with `options`.
Event LrMismatchEvent(absl::Time time, const EventJob& job, const LrMismatchFinding& f,
                      const ResumeOptions& options);
// kDataPositionMismatch: `f`, judged with `options`.
Event DataPositionMismatchEvent(absl::Time time, const EventJob& job,
                                const DataPositionFinding& f, const ResumeOptions& options);
// kResumeSpike: `f`, judged with `options`.
Event ResumeSpikeEvent(absl::Time time, const EventJob& job, const ResumeSpikeFinding& f,
                       const ResumeOptions& options);

// ---- The lifecycle ----

// kStateChange: the job moved `from` -> `to` for `reason`.
Event StateChangeEvent(absl::Time time, const EventJob& job, JobState from, JobState to,
                       const std::string& reason);

// Who a new generation runs without, by why.
struct LeftOutNodes {
  std::vector<std::string> quarantined;
  std::vector<std::string> unreachable;
  std::vector<std::string> unheard;
  // A restart-elsewhere verdict named them (verdicts.h).
  std::vector<std::string> elsewhere;
  // A node such a verdict named but the job could not run without, and why.
  std::string kept;
  // Its health check (--preflight) failed and the quarantine cap kept it.
  std::vector<std::string> failed_preflight;
};
// kRestart: generation `job.generation` started on `nodes` (their names),
// without the nodes `left_out`; after `cause`.
Event RestartEvent(absl::Time time, const EventJob& job, const std::vector<std::string>& nodes,
                   LeftOutNodes left_out, const std::string& cause);

// kRecovered: generation `job.generation` made its first step; `recovery`
// says where the time from the failure went.
Event RecoveredEvent(absl::Time time, const EventJob& job, const RecoveryFigures& recovery);

// kRendezvous: where the generation `decision` is for meets (the node that
// hosts torchrun's store, its address and port, and the node ranks when
// they were numbered afresh).
Event RendezvousEvent(absl::Time time, const EventJob& job, const RendezvousDecision& decision);

// kWorldSizeChanged: the generation runs `new_world_size` ranks where the
// last ran `old_world_size`; the global batches in samples, 0 when unknown.
Event WorldSizeChangedEvent(absl::Time time, const EventJob& job, uint32_t old_world_size,
                            uint32_t new_world_size, uint64_t old_global_batch,
                            uint64_t new_global_batch);

// Why a job is held: the reason for people (the job's state reason too)
// and the figures it states.
struct HoldCause {
  std::string reason;
  std::vector<std::pair<std::string, double>> figures;
};
// The restart cap: `restarts` restarts within `window` (--restart-limit
// `limit`), the job's state reason then `last_failure`.
HoldCause RestartLimitHold(int restarts, absl::Duration window, int limit,
                           const std::string& last_failure);
// The failure is the training code's own (failure_classifier.h:
// WorkloadRepeat says why).
HoldCause WorkloadHold(std::string why);
// The command failed before any rank reported, as the workload's
// (early_failure.h: EarlyJudgement says why).
HoldCause EarlyFailureHold(std::string why);
// The job's own `verdict` on `failure` on `node` is stop.
HoldCause VerdictHold(const Verdict& verdict, const std::string& failure, const std::string& node);
// A checkpoint failed soon after every load past the fallback cap, or loss
// spikes came in a row past the spike rollback cap (checkpoint_fallback.h).
HoldCause FallbackHold(const FallbackDecision& decision);
// kHold: the job is held for `cause`; `resume`: where the generation a
// resume starts is told to resume (ResumeAdviceText; empty: as it likes).
Event HoldEvent(absl::Time time, const EventJob& job, const HoldCause& cause,
                const std::string& resume = "");

// kResume: an operator resumed the job from `from`, where it was for
// `reason`.
Event ResumeEvent(absl::Time time, const EventJob& job, JobState from, const std::string& reason);

// ---- Nodes ----

// What the quarantine policy counted against a node: `failures` within
// `window` (its reason states both).
struct FailureCount {
  int failures = 0;
  absl::Duration window;
};

// kQuarantine: `node` quarantined by `by` ("policy", "operator") for
// `reason`; `counted`: the policy's count, when it decided.
Event QuarantineEvent(absl::Time time, const EventJob& job, const std::string& node,
                      absl::string_view by, const std::string& reason,
                      const std::optional<FailureCount>& counted = std::nullopt);

// kUnquarantine: an operator lifted `node`'s quarantine.
Event UnquarantineEvent(absl::Time time, const EventJob& job, const std::string& node);

// kQuarantineSkipped: `node` qualified (`counted`, for `reason`), but
// `quarantined` of the cluster's `nodes` nodes are quarantined already, the
// most `max_fraction` allows.
Event QuarantineSkippedEvent(absl::Time time, const EventJob& job, const std::string& node,
                             const std::string& reason, const FailureCount& counted,
                             size_t quarantined, double max_fraction, size_t nodes);

// kFence or kUnfence (by `action`): the command for `node` ran, `ok` or
// not, and said `detail`.
Event FenceEvent(absl::Time time, const EventJob& job, FenceAction action,
                 const std::string& node, bool ok, const std::string& detail);

// kLeadership: under an election (docs/ha.md) this trainsupd's `role` is
// now "leader", "suspended" or "standby", at `epoch` (the election key's
// revision; 0: not elected), because of `reason`. About no job.
Event LeadershipEvent(absl::Time time, absl::string_view role, int64_t epoch,
                      const std::string& reason);

// kPersistFailed: the state store refused a commit (`what`), about `node`
// when it names one.
Event PersistFailedEvent(absl::Time time, const EventJob& job, const std::string& node,
                         const std::string& what);

// ---- Checkpoint plans (kCheckpointPlan) ----

// What the planner based a periodic plan on.
struct PlanBasis {
  double interval_seconds = 0;  // the planned interval, before rounding to steps
  double checkpoint_seconds = 0;  // C
  bool checkpoint_measured = false;
  double mtbf_seconds = 0;  // M, conservative
  int failures = 0;         // behind M
  double exposure_seconds = 0;
  double restart_seconds = 0;  // R
  bool restart_measured = false;
  double expected_waste_fraction = 0;
  std::string verdict;  // empty when the verdict is to checkpoint every interval
  std::vector<std::string> warnings;
};
// The planner published `plan` (periodic, its id assigned) from `basis`.
Event CheckpointPlanEvent(absl::Time time, const EventJob& job, const CheckpointPlanSpec& plan,
                          const PlanBasis& basis);
// Plan `revoked_plan_id` was revoked by `plan` (which restates the schedule
// before it from the revoked one's first step): `node` did not hold it
// `guard_steps` steps before that step.
Event PlanRevokedEvent(absl::Time time, const EventJob& job, const CheckpointPlanSpec& plan,
                       uint64_t revoked_plan_id, const std::string& node, int64_t guard_steps);
// An operator asked for a checkpoint: `plan` adds its one-off step, about
// `ahead_seconds` ahead.
Event CheckpointRequestedEvent(absl::Time time, const EventJob& job,
                               const CheckpointPlanSpec& plan, double ahead_seconds);

// ---- Bad checkpoints and spike rollback (checkpoint_fallback.h) ----

// kCheckpointSuspect: `decision.checkpoint` failed soon after its load in two
// generations in a row (a fallback or a hold follows), or was committed at
// or after a non-finite loss (kCut).
Event CheckpointSuspectEvent(absl::Time time, const EventJob& job,
                             const FallbackDecision& decision);
// kCheckpointFallback: the next generations load the newest checkpoint at or
// below the decision's limit.
Event CheckpointFallbackEvent(absl::Time time, const EventJob& job,
                              const FallbackDecision& decision);
// kSpikeRollback: restart from the decision's checkpoint, skipping its range.
Event SpikeRollbackEvent(absl::Time time, const EventJob& job, const FallbackDecision& decision);

// ---- Kill criteria (docs/kill-criteria.md) ----

// What stopping a job for a kill criterion saves: the steps left of the
// total the script told, at the generation's step time, on every rank.
struct KillSaving {
  std::optional<int64_t> total_steps;
  double step_seconds = 0;  // the median rank's median step time
  uint32_t gpus = 0;        // the job's world size
  double gpu_seconds = 0;   // GpuSecondsSaved(...)
};
// kKilledByCriterion: criterion `f` (set by `source`: "script" or
// "operator") was met; `observe_only`: reported only, the job goes on;
// else it is stopped on every node and not restarted. Its figures: the
// criterion (0 loss_above, 1 reference_curve, 2 loss_spikes), the steps and
// values, observe_only (0/1) and the saving.
Event KilledByCriterionEvent(absl::Time time, const EventJob& job, const KillFiring& f,
                             absl::string_view source, bool observe_only,
                             const KillSaving& saving);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_EVENTS_H_
