#include "daemon/core/job_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "calc/checkpoint_planner.h"
#include "daemon/core/events.h"
#include "daemon/core/node_loss_detector.h"

namespace trainsup {

MtbfEstimate JobPlanner::JobMtbf(const JobEntry& job, absl::Time now) const {
  return mtbf_.Estimate(job.costs().ExposureSeconds(now), job.costs().failures());
}

MtbfEstimate JobPlanner::ClusterMtbf(const JobTable& jobs, absl::Time now) const {
  double exposure = 0;
  int failures = 0;
  jobs.ForEach([&](const JobEntry& job) {
    exposure += job.costs().ExposureSeconds(now);
    failures += job.costs().failures();
  });
  return mtbf_.Estimate(exposure, failures);
}

NodeIndex JobPlanner::MissingAgent(const JobEntry& job, absl::Time now, uint64_t plan_id) const {
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.member_generation != job.job().generation() || quarantine_.IsQuarantined(node.name)) {
      continue;
    }
    if (NodeLossDetector::IsSilent(node, now)) return i;
    if (plan_id != 0 && node.plans_held_through < plan_id) return i;
  }
  return kNoNode;
}

void JobPlanner::CheckAcks(absl::Time now, JobEntry& job, const JobStepStats& stats) {
  const std::vector<CheckpointPlanSpec> plans = job.plans().plans();  // Publish below appends
  const double step_s = stats.median_rank_p50_s;
  for (const CheckpointPlanSpec& plan : plans) {
    if (plan.plan_id <= job.plans().confirmed_through()) continue;
    const NodeIndex missing = MissingAgent(job, now, plan.plan_id);
    if (missing == kNoNode) {
      job.mutable_plans().Confirm(plan.plan_id);
      continue;
    }
    // Revoke it while no rank can have reached its first step: half a
    // horizon (at least 2 steps) of guard.
    const int64_t guard =
        step_s > 0 ? std::max<int64_t>(2, job.plans().HorizonSteps(step_s) / 2) : 2;
    if (job.job().max_step() + guard < plan.effective_from_step) continue;
    CheckpointPlanSpec restated = job.plans().Revoking(plan);
    const std::string& node = agents_.NameOf(missing);
    job.mutable_plans().Confirm(plan.plan_id);
    const CheckpointPlanSpec& published = job.mutable_plans().Publish(now, std::move(restated));
    decisions_.Emit(&job, PlanRevokedEvent(now, EventJobOf(job), published, plan.plan_id, node,
                                           guard));
    job.mutable_plans().Confirm(job.plans().plans().back().plan_id);
  }
}

void JobPlanner::Replan(absl::Time now, JobEntry& job, const JobStepStats& stats) {
  if (!options_.plan_checkpoints || job.job().max_step() < 0) return;
  const double step_s = stats.median_rank_p50_s;
  if (step_s <= 0) return;
  // A plan published while an agent cannot be heard would not reach it.
  if (MissingAgent(job, now, 0) != kNoNode) return;

  const CostFigure c = CheckpointCost(job);
  const CostFigure r = RestartCost(job);
  const MtbfEstimate mtbf = JobMtbf(job, now);
  CheckpointPlanInputs inputs;
  inputs.checkpoint_seconds = std::max(1e-3, c.seconds);
  inputs.restart_seconds = r.seconds;
  inputs.async_write_seconds = job.costs().AsyncWrite();
  inputs.mtbf_seconds = mtbf.conservative_seconds;
  absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(inputs);
  if (!plan.ok()) return;

  const int64_t steps = IntervalSteps(plan->interval_seconds, step_s);
  if (!job.plans().WorthReplanning(steps)) return;
  CheckpointPlanSpec spec = job.plans().Periodic(job.job().max_step(), step_s, steps);
  job.mutable_plans().set_figures(*plan);
  PlanBasis basis;
  basis.interval_seconds = plan->interval_seconds;
  basis.checkpoint_seconds = inputs.checkpoint_seconds;
  basis.checkpoint_measured = c.measured;
  basis.mtbf_seconds = inputs.mtbf_seconds;
  basis.failures = mtbf.failures;
  basis.exposure_seconds = mtbf.exposure_seconds;
  basis.restart_seconds = inputs.restart_seconds;
  basis.restart_measured = r.measured;
  basis.expected_waste_fraction = plan->at_interval.total_waste_fraction;
  if (plan->verdict != CheckpointVerdict::kCheckpointEvery) basis.verdict = plan->verdict_text;
  basis.warnings = plan->warnings;
  const CheckpointPlanSpec& published = job.mutable_plans().Publish(now, std::move(spec));
  decisions_.Emit(&job, CheckpointPlanEvent(now, EventJobOf(job), published, basis));
}

absl::StatusOr<std::string> JobPlanner::RequestCheckpoint(absl::Time now, JobEntry& job) {
  const Job& observed = job.job();
  const JobState state = job.lifecycle().state;
  if (state != JobState::kRunning || observed.max_step() < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " is ", JobStateName(state),
        observed.max_step() < 0 ? " and has made no step yet" : "", ": no step to checkpoint at"));
  }
  const double step_s = ComputeJobStepStats(observed).median_rank_p50_s;
  if (step_s <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " has no measured step time yet (it needs two steps); try again shortly"));
  }
  // A one-off is final once a rank holds it: every agent must be able to get it.
  if (const NodeIndex missing = MissingAgent(job, now, 0); missing != kNoNode) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), ": node ", agents_.NameOf(missing),
        " cannot be heard; a checkpoint its ranks never learn of would hang the others; try "
        "again when it is back"));
  }
  CheckpointPlanSpec spec = job.plans().OneOff(observed.max_step(), step_s);
  const int64_t step = spec.one_off_steps.front();
  const double ahead_s = static_cast<double>(step - observed.max_step()) * step_s;
  const CheckpointPlanSpec& published = job.mutable_plans().Publish(now, std::move(spec));
  decisions_.Emit(&job, CheckpointRequestedEvent(now, EventJobOf(job), published, ahead_s));
  return absl::StrFormat("job %s will checkpoint at step %d (in about %.0fs)", job.id(), step,
                         ahead_s);
}

}  // namespace trainsup
