#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_CHECKPOINT_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_CHECKPOINT_RULE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/signal_rule.h"

namespace trainsup {

// The first step from which `plans` have asked for a checkpoint at least
// every in_force.interval_steps without a break: where the plan in force
// began, or, when it lengthened the interval or kept it, where the plan
// before it began (and so on back). A plan that shortened it starts afresh.
int64_t ScheduleStart(absl::Span<const CheckpointPlanSpec> plans,
                      const CheckpointPlanSpec& in_force);

// Checkpoint saves (docs/signals.md, "Checkpoint saves"): kCheckpointFailed
// once for each step whose save a rank reported failed (naming the first
// rank; a shared file system that fails every rank's is one event), and
// kCheckpointOverdue once for each stretch in which the job trained more
// than `factor` x the planned interval (the periodic plan in force, in
// steps; PlanInForce) past the latest of: its last committed checkpoint,
// the step this generation resumed from, ScheduleStart() of the plan in
// force. Counted in steps, so a hang, a restart's idle time or a slow save
// that blocks the loop is never overdue; a plan just shortened is judged
// from its own first step.
// Gauges, once a periodic plan is in force and a step was seen:
// checkpoint_age_steps, checkpoint_planned_steps, checkpoint_overdue (0/1).
class CheckpointSignal : public SignalRule {
 public:
  explicit CheckpointSignal(const CheckpointOverdueOptions& options) : options_(options) {}

  void ObserveStep(const StepSignals& s) override;
  void ObserveCheckpoint(const CheckpointOutcome& c) override;
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override;
  void Gauges(std::vector<std::pair<std::string, double>>& out) const override;
  void MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) override;

 private:
  // Where the unprotected stretch began under a plan in force from
  // `plan_from` (see the class comment). REQUIRES: a step was seen.
  int64_t Since(int64_t plan_from) const;

  const CheckpointOverdueOptions options_;
  std::optional<int64_t> first_step_;  // the generation's
  int64_t step_ = -1;                  // the last one seen
  double step_s_ = 0;                  // the last step time measured
  std::optional<int64_t> committed_;   // this generation's last committed
  std::optional<int64_t> committed_before_;  // the one before it
  // Failed saves not yet reported, and the last steps one was reported for:
  // more than one, as ranks that took a plan a step apart fail the saves of
  // two steps and report them interleaved (466, 467, 466, 467).
  static constexpr size_t kFailedStepsKept = 16;
  std::vector<CheckpointOutcome> failed_;
  std::deque<int64_t> failed_reported_;
  // The plan in force at the last sweep: its interval (0: none in force)
  // and ScheduleStart(); the stretch an overdue event was made for.
  int64_t interval_ = 0;
  int64_t plan_from_ = 0;
  std::optional<int64_t> overdue_reported_;
};

// kCheckpointFailed: `failed` (its rank on `node`), with the job's last
// committed checkpoint (`committed`, nullopt: none this generation) and
// `step`, the job's step now.
Event CheckpointFailedEvent(absl::Time time, const EventJob& job, const CheckpointOutcome& failed,
                            const std::string& node, std::optional<int64_t> committed,
                            int64_t step);

// kCheckpointOverdue: at `step`, `since` is where the unprotected stretch
// began, `interval` the plan's steps, `limit` the overdue bound (factor x
// interval), `step_s` the step time (0: unknown).
struct CheckpointOverdueFinding {
  int64_t step = 0;
  int64_t since = 0;
  int64_t interval = 0;
  double limit = 0;
  double step_s = 0;
};
Event CheckpointOverdueEvent(absl::Time time, const EventJob& job,
                             const CheckpointOverdueFinding& f);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_CHECKPOINT_RULE_H_
