#ifndef TRAINSUP_DAEMON_CORE_CHECKPOINT_PUBLISHER_H_
#define TRAINSUP_DAEMON_CORE_CHECKPOINT_PUBLISHER_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "calc/checkpoint_planner.h"
#include "daemon/core/checkpoint_schedule.h"

namespace trainsup {

struct PlanPublishOptions {
  // A new plan takes effect this far ahead (and at least kMinHorizonSteps
  // steps ahead), so that every rank holds it before its first step.
  // Default: 10s.
  absl::Duration horizon = absl::Seconds(10);
  // Publish a new periodic plan only when the interval moves by more than
  // this fraction of the one in force. Default: 0.2.
  double replan_threshold = 0.2;
};

// The plans one job's ranks hold, and when a new one is worth publishing.
// Every rank must answer should_checkpoint(step) the same, so a plan never
// changes a step a rank may already have reached: it takes effect a horizon
// ahead, and never before an earlier plan's start. Pure; thread-compatible.
class CheckpointPublisher {
 public:
  // A new plan starts at least this many steps ahead, whatever the step time.
  static constexpr int64_t kMinHorizonSteps = 5;
  // ... and at most this many: validation takes any step time >= 0, and one
  // near 0 (1e-39 s) would make the count overflow int64.
  static constexpr int64_t kMaxHorizonSteps = int64_t{1} << 40;
  // Plans kept (the ranks hold the same). A job sees few; 64 is plenty.
  static constexpr size_t kMaxPlans = 64;

  explicit CheckpointPublisher(PlanPublishOptions options) : options_(options) {}

  // Steps ahead a new plan starts at `step_s` seconds a step, from
  // kMinHorizonSteps to kMaxHorizonSteps. REQUIRES: step_s > 0.
  int64_t HorizonSteps(double step_s) const;

  // Whether `interval_steps` differs from the interval in force by more than
  // the replan threshold (always true before the first plan).
  bool WorthReplanning(int64_t interval_steps) const;

  // Checkpoints every `interval_steps`, anchored at the first step every rank
  // can hold it from: a horizon past `max_step`, and no earlier than any plan
  // held (after a restart went back to its checkpoint's step, an earlier
  // start would leave the older plan in force from that older plan's start).
  CheckpointPlanSpec Periodic(int64_t max_step, double step_s, int64_t interval_steps) const;

  // The schedule in force plus a one-off checkpoint a horizon past `max_step`.
  CheckpointPlanSpec OneOff(int64_t max_step, double step_s) const;

  // Stamps `spec` with the next plan id and keeps it; returns the kept plan.
  // Ids grow across the supervisor's own restarts too (the agents keep the
  // plans of the one before and take an id they hold as a resend): the first
  // plan of a job takes the time in microseconds.
  const CheckpointPlanSpec& Publish(absl::Time now, CheckpointPlanSpec spec);

  // Whether plans an agent says it holds can be this job's: well formed
  // (ids from 1 to kMaxPlanId, steps not negative, at most kMaxPlans, each
  // with at most kMaxOneOffSteps), none that differs from the plan of the
  // same id kept here, and, once this supervisor published plans of the job
  // itself, none newer than its newest. InvalidArgument says which and why.
  absl::Status CheckHeld(const std::vector<CheckpointPlanSpec>& held) const;
  static constexpr size_t kMaxOneOffSteps = 64;
  // Ids are microseconds since 1970 or above: 2^62 is 146,000 years ahead,
  // and leaves room to count up without overflow.
  static constexpr uint64_t kMaxPlanId = uint64_t{1} << 62;

  // Takes back plans the agents hold that this supervisor lost (it
  // restarted), by id, in id order. REQUIRES: CheckHeld(held) is ok.
  void Adopt(const std::vector<CheckpointPlanSpec>& held);

  const std::vector<CheckpointPlanSpec>& plans() const { return plans_; }

  // Plans up to this id are held by every agent of the job (or were
  // settled otherwise): they may take effect. A newer plan that is not held
  // by every agent before a rank can reach its first step is revoked.
  uint64_t confirmed_through() const { return confirmed_through_; }
  void Confirm(uint64_t plan_id) { confirmed_through_ = std::max(confirmed_through_, plan_id); }

  // A plan that restates, from `spec`'s first step on, the schedule that was
  // in force before `spec` (what every rank that never got `spec` does
  // anyway), so that the ranks that got it agree with those that did not.
  CheckpointPlanSpec Revoking(const CheckpointPlanSpec& spec) const;

  // The planner's figures behind the last periodic plan.
  void set_figures(const CheckpointPlan& figures) { figures_ = figures; }
  const std::optional<CheckpointPlan>& figures() const { return figures_; }

 private:
  const PlanPublishOptions options_;
  std::vector<CheckpointPlanSpec> plans_;  // by id
  uint64_t published_through_ = 0;         // the newest id Publish stamped
  std::optional<CheckpointPlan> figures_;
  uint64_t confirmed_through_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CHECKPOINT_PUBLISHER_H_
