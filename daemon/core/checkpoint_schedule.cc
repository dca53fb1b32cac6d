#include "daemon/core/checkpoint_schedule.h"

#include <algorithm>

namespace trainsup {

const CheckpointPlanSpec* PlanInForce(absl::Span<const CheckpointPlanSpec> plans, int64_t step) {
  const CheckpointPlanSpec* in_force = nullptr;
  for (const CheckpointPlanSpec& plan : plans) {
    if (plan.effective_from_step > step) continue;
    if (in_force == nullptr || plan.effective_from_step > in_force->effective_from_step ||
        (plan.effective_from_step == in_force->effective_from_step &&
         plan.plan_id > in_force->plan_id)) {
      in_force = &plan;
    }
  }
  return in_force;
}

bool ShouldCheckpoint(const std::vector<CheckpointPlanSpec>& plans, int64_t step) {
  for (const CheckpointPlanSpec& plan : plans) {
    if (std::find(plan.one_off_steps.begin(), plan.one_off_steps.end(), step) !=
        plan.one_off_steps.end()) {
      return true;
    }
  }
  const CheckpointPlanSpec* in_force = PlanInForce(plans, step);
  if (in_force == nullptr || in_force->interval_steps <= 0 || step < in_force->anchor_step) {
    return false;
  }
  return (step - in_force->anchor_step) % in_force->interval_steps == 0;
}

int64_t NextCheckpointStep(const std::vector<CheckpointPlanSpec>& plans, int64_t from,
                           int64_t limit) {
  // Not step by step (a plan every 15,000 steps made each call 15,000
  // ShouldCheckpoint calls): every checkpoint step is a one-off step or a
  // multiple of the plan in force there, and a plan in force at a step is in
  // force at every earlier step since it took effect. So the answer is among
  // the one-offs and each plan's first multiple from where it could be in
  // force; ShouldCheckpoint judges each candidate.
  from = std::max<int64_t>(from, 0);
  int64_t best = -1;
  auto consider = [&](int64_t s) {
    if (s < from || s >= from + limit || (best >= 0 && s >= best)) return;
    if (ShouldCheckpoint(plans, s)) best = s;
  };
  for (const CheckpointPlanSpec& plan : plans) {
    for (int64_t s : plan.one_off_steps) consider(s);
    if (plan.interval_steps <= 0) continue;
    const int64_t start = std::max({from, plan.effective_from_step, plan.anchor_step});
    const int64_t past = (start - plan.anchor_step) % plan.interval_steps;
    consider(past == 0 ? start : start + plan.interval_steps - past);
  }
  return best;
}

}  // namespace trainsup
