#include "daemon/core/checkpoint_publisher.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trainsup {

int64_t CheckpointPublisher::HorizonSteps(double step_s) const {
  const double steps = std::ceil(absl::ToDoubleSeconds(options_.horizon) / step_s);
  // Capped before the conversion, which is undefined past int64's range.
  if (!(steps < static_cast<double>(kMaxHorizonSteps))) return kMaxHorizonSteps;
  return std::max<int64_t>(kMinHorizonSteps, static_cast<int64_t>(steps));
}

bool CheckpointPublisher::WorthReplanning(int64_t interval_steps) const {
  const int64_t current = plans_.empty() ? 0 : plans_.back().interval_steps;
  if (current <= 0) return true;
  // A plan change costs a horizon of the ranks' attention and moves the
  // checkpoint steps; small moves are not worth it.
  return std::abs(static_cast<double>(interval_steps - current)) / current >
         options_.replan_threshold;
}

CheckpointPlanSpec CheckpointPublisher::Periodic(int64_t max_step, double step_s,
                                                 int64_t interval_steps) const {
  CheckpointPlanSpec spec;
  spec.effective_from_step = max_step + HorizonSteps(step_s);
  for (const CheckpointPlanSpec& held : plans_) {
    spec.effective_from_step = std::max(spec.effective_from_step, held.effective_from_step);
  }
  spec.anchor_step = spec.effective_from_step;
  spec.interval_steps = interval_steps;
  return spec;
}

CheckpointPlanSpec CheckpointPublisher::OneOff(int64_t max_step, double step_s) const {
  CheckpointPlanSpec spec;
  if (!plans_.empty()) spec = plans_.back();
  spec.one_off_steps = {max_step + HorizonSteps(step_s)};
  return spec;
}

const CheckpointPlanSpec& CheckpointPublisher::Publish(absl::Time now, CheckpointPlanSpec spec) {
  const uint64_t first = static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixMicros(now)));
  spec.plan_id = plans_.empty() ? first : std::max(first, plans_.back().plan_id + 1);
  published_through_ = spec.plan_id;
  plans_.push_back(std::move(spec));
  if (plans_.size() > kMaxPlans) plans_.erase(plans_.begin());
  return plans_.back();
}

CheckpointPlanSpec CheckpointPublisher::Revoking(const CheckpointPlanSpec& spec) const {
  // The plan in force just before `spec`: the greatest effective_from_step
  // (then plan_id) among the older plans, periodic part only.
  const CheckpointPlanSpec* before = nullptr;
  for (const CheckpointPlanSpec& p : plans_) {
    if (p.plan_id >= spec.plan_id) continue;
    if (before == nullptr || std::make_pair(p.effective_from_step, p.plan_id) >
                                 std::make_pair(before->effective_from_step, before->plan_id)) {
      before = &p;
    }
  }
  CheckpointPlanSpec restated;
  if (before != nullptr) {
    restated.anchor_step = before->anchor_step;
    restated.interval_steps = before->interval_steps;
  }
  restated.effective_from_step = spec.effective_from_step;
  return restated;
}

absl::Status CheckpointPublisher::CheckHeld(const std::vector<CheckpointPlanSpec>& held) const {
  if (held.size() > kMaxPlans) {
    return absl::InvalidArgumentError(
        absl::StrCat(held.size(), " checkpoint plans held; a job has at most ", kMaxPlans));
  }
  for (const CheckpointPlanSpec& plan : held) {
    const bool steps_ok =
        plan.anchor_step >= 0 && plan.interval_steps >= 0 && plan.effective_from_step >= 0 &&
        plan.one_off_steps.size() <= kMaxOneOffSteps &&
        std::all_of(plan.one_off_steps.begin(), plan.one_off_steps.end(),
                    [](int64_t s) { return s >= 0; });
    if (plan.plan_id == 0 || plan.plan_id > kMaxPlanId || !steps_ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint plan ", plan.plan_id, " is malformed (an id from 1 to ",
                       kMaxPlanId, ", steps >= 0, at most ", kMaxOneOffSteps, " one-off steps)"));
    }
    auto same_id = [&](const CheckpointPlanSpec& p) { return p.plan_id == plan.plan_id; };
    auto mine = std::find_if(plans_.begin(), plans_.end(), same_id);
    const bool differs = mine != plans_.end() &&
                         (mine->anchor_step != plan.anchor_step ||
                          mine->interval_steps != plan.interval_steps ||
                          mine->effective_from_step != plan.effective_from_step ||
                          mine->one_off_steps != plan.one_off_steps);
    // Before this supervisor published a plan of the job (it restarted and
    // lost them), the agents' plans are all there is to go by.
    const bool newer = published_through_ != 0 && plan.plan_id > published_through_;
    if (differs || newer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint plan ", plan.plan_id, " was never published for this job by this supervisor"));
    }
  }
  return absl::OkStatus();
}

void CheckpointPublisher::Adopt(const std::vector<CheckpointPlanSpec>& held) {
  bool added = false;
  // The agents hold them already: they are settled.
  for (const CheckpointPlanSpec& plan : held) Confirm(plan.plan_id);
  for (const CheckpointPlanSpec& plan : held) {
    auto same = [&](const CheckpointPlanSpec& p) { return p.plan_id == plan.plan_id; };
    if (std::none_of(plans_.begin(), plans_.end(), same)) {
      plans_.push_back(plan);
      added = true;
    }
  }
  if (!added) return;
  std::sort(plans_.begin(), plans_.end(),
            [](const CheckpointPlanSpec& a, const CheckpointPlanSpec& b) {
              return a.plan_id < b.plan_id;
            });
}

}  // namespace trainsup
