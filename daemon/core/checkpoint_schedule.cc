#include "daemon/core/checkpoint_schedule.h"

#include <algorithm>

namespace trainsup {

bool ShouldCheckpoint(const std::vector<CheckpointPlanSpec>& plans, int64_t step) {
  const CheckpointPlanSpec* in_force = nullptr;
  for (const CheckpointPlanSpec& plan : plans) {
    if (std::find(plan.one_off_steps.begin(), plan.one_off_steps.end(), step) !=
        plan.one_off_steps.end()) {
      return true;
    }
    if (plan.effective_from_step > step) continue;
    if (in_force == nullptr || plan.effective_from_step > in_force->effective_from_step ||
        (plan.effective_from_step == in_force->effective_from_step &&
         plan.plan_id > in_force->plan_id)) {
      in_force = &plan;
    }
  }
  if (in_force == nullptr || in_force->interval_steps <= 0 || step < in_force->anchor_step) {
    return false;
  }
  return (step - in_force->anchor_step) % in_force->interval_steps == 0;
}

int64_t NextCheckpointStep(const std::vector<CheckpointPlanSpec>& plans, int64_t from,
                           int64_t limit) {
  for (int64_t s = std::max<int64_t>(from, 0); s < from + limit; ++s) {
    if (ShouldCheckpoint(plans, s)) return s;
  }
  return -1;
}

}  // namespace trainsup
