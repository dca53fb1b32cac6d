#ifndef TRAINSUP_DAEMON_CORE_CHECKPOINT_SCHEDULE_H_
#define TRAINSUP_DAEMON_CORE_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace trainsup {

// When ranks checkpoint, as the supervisor publishes it: steps
// s >= effective_from_step with (s - anchor_step) % interval_steps == 0, plus
// the one-off steps listed. A new plan takes effect only at its
// effective_from_step, far enough ahead that every rank holds it by then.
struct CheckpointPlanSpec {
  uint64_t plan_id = 0;  // increases with each plan of a job
  int64_t anchor_step = 0;
  int64_t interval_steps = 0;  // 0: no periodic checkpoints
  int64_t effective_from_step = 0;
  std::vector<int64_t> one_off_steps;
};

// The decision every rank makes (the python helper's should_checkpoint is
// the same function): a pure function of the plans the rank holds, so that
// every rank holding the same plans answers the same for the same step. For
// step s the plan in force is the one with the greatest effective_from_step
// <= s (the greatest plan_id among equals); a step any plan names as a
// one-off is a checkpoint step too.
bool ShouldCheckpoint(const std::vector<CheckpointPlanSpec>& plans, int64_t step);

// That plan in force at `step` (nullptr when none is yet).
const CheckpointPlanSpec* PlanInForce(absl::Span<const CheckpointPlanSpec> plans, int64_t step);

// The first checkpoint step >= `from` under `plans` within `limit` steps, or
// -1 when there is none.
int64_t NextCheckpointStep(const std::vector<CheckpointPlanSpec>& plans, int64_t from,
                           int64_t limit = 1'000'000);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CHECKPOINT_SCHEDULE_H_
