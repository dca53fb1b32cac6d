// The Supervisor's checkpoint planning: MTBF, measured costs, and the plans
// published to the ranks (see checkpoint_planner.h and checkpoint_schedule.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/format.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/supervisor.h"

namespace trainsup {
namespace {

// A new plan starts at least this many steps ahead, whatever the step time.
constexpr int64_t kMinHorizonSteps = 5;
// Plans kept per job (and held by the ranks). Older ones no longer decide
// any step the job will reach again only if the job never goes back that
// far; 64 is plenty for the few plans a job sees.
constexpr size_t kMaxPlans = 64;

}  // namespace

MtbfEstimate Supervisor::JobMtbf(const JobControl& control, absl::Time now) const {
  return mtbf_.Estimate(control.ExposureSeconds(now), control.failures);
}

MtbfEstimate Supervisor::ClusterMtbf(absl::Time now) const {
  double exposure = 0;
  int failures = 0;
  for (const auto& [id, control] : controls_) {
    exposure += control->ExposureSeconds(now);
    failures += control->failures;
  }
  return mtbf_.Estimate(exposure, failures);
}

double Supervisor::CheckpointCost(const JobControl& control, bool* measured) const {
  *measured = !control.checkpoint_costs.empty();
  return *measured ? control.checkpoint_costs.Percentile(0.5)
                   : absl::ToDoubleSeconds(options_.checkpoint_cost_prior);
}

double Supervisor::RestartCost(const JobControl& control, bool* measured) const {
  *measured = !control.restart_costs.empty();
  return *measured ? control.restart_costs.Percentile(0.5)
                   : absl::ToDoubleSeconds(options_.restart_cost_prior);
}

void Supervisor::Publish(absl::Time now, Job& job, CheckpointPlanSpec spec, const std::string& why,
                         std::vector<std::pair<std::string, double>> figures) {
  JobControl& control = ControlFor(job);
  // Ids grow across this supervisor's own restarts too (the agents keep the
  // plans of the one before, and take an id they hold as a resend): the
  // first plan of a job takes the time in microseconds.
  const uint64_t first = static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixMicros(now)));
  spec.plan_id = control.plans.empty() ? first : std::max(first, control.plans.back().plan_id + 1);
  control.plans.push_back(spec);
  if (control.plans.size() > kMaxPlans) control.plans.erase(control.plans.begin());
  control.planned_at = now;
  Event e;
  e.time = now;
  e.kind = EventKind::kCheckpointPlan;
  e.message = why;
  e.figures = {{"plan_id", static_cast<double>(spec.plan_id)},
               {"interval_steps", static_cast<double>(spec.interval_steps)},
               {"effective_from_step", static_cast<double>(spec.effective_from_step)}};
  e.figures.insert(e.figures.end(), figures.begin(), figures.end());
  Emit(&job, std::move(e));
}

void Supervisor::Replan(absl::Time now, Job& job, const JobStepStats& stats) {
  if (!options_.plan_checkpoints || job.max_step() < 0) return;
  JobControl& control = ControlFor(job);
  const double step_s = stats.median_rank_p50_s;
  if (step_s <= 0) return;

  bool c_measured = false;
  bool r_measured = false;
  CheckpointPlanInputs inputs;
  inputs.checkpoint_seconds = std::max(1e-3, CheckpointCost(control, &c_measured));
  inputs.restart_seconds = RestartCost(control, &r_measured);
  inputs.async_write_seconds =
      control.checkpoint_async.empty() ? 0 : control.checkpoint_async.Percentile(0.5);
  const MtbfEstimate mtbf = JobMtbf(control, now);
  inputs.mtbf_seconds = mtbf.conservative_seconds;
  absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(inputs);
  if (!plan.ok()) return;

  const int64_t steps = IntervalSteps(plan->interval_seconds, step_s);
  const int64_t current = control.plans.empty() ? 0 : control.plans.back().interval_steps;
  // Hysteresis: a plan change costs a horizon of ranks' attention and moves
  // the checkpoint steps; small moves are not worth it.
  if (current > 0 &&
      std::abs(static_cast<double>(steps - current)) / current <= options_.replan_threshold) {
    return;
  }
  const int64_t horizon = std::max<int64_t>(
      kMinHorizonSteps,
      static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(options_.plan_horizon) / step_s)));
  std::vector<std::pair<std::string, double>> spec_figures;
  CheckpointPlanSpec spec;
  // Never before an earlier plan's start: after a restart went back to its
  // checkpoint's step, an earlier-starting plan would leave the older plan in
  // force from that older plan's start on.
  spec.effective_from_step = job.max_step() + horizon;
  for (const CheckpointPlanSpec& held : control.plans) {
    spec.effective_from_step = std::max(spec.effective_from_step, held.effective_from_step);
  }
  spec.anchor_step = spec.effective_from_step;
  spec.interval_steps = steps;
  control.plan_figures = *plan;
  spec_figures = {{"interval_seconds", plan->interval_seconds},
                  {"mtbf_seconds", inputs.mtbf_seconds},
                  {"checkpoint_seconds", inputs.checkpoint_seconds},
                  {"restart_seconds", inputs.restart_seconds}};
  std::string why = absl::StrFormat(
      "checkpoint every %d steps (%s) from step %d: C=%s%s, M=%s (conservative; %d "
      "failures over %s), R=%s%s; expected waste %s",
      steps, HumanSeconds(plan->interval_seconds), spec.effective_from_step,
      HumanSeconds(inputs.checkpoint_seconds), c_measured ? " measured" : " prior",
      HumanSeconds(mtbf.conservative_seconds), mtbf.failures, HumanSeconds(mtbf.exposure_seconds),
      HumanSeconds(inputs.restart_seconds), r_measured ? " measured" : " prior",
      Percent(plan->at_interval.total_waste_fraction));
  if (plan->verdict != CheckpointVerdict::kCheckpointEvery) absl::StrAppend(&why, "; ", plan->verdict_text);
  for (const std::string& w : plan->warnings) absl::StrAppend(&why, "; ", w);
  Publish(now, job, std::move(spec), why, std::move(spec_figures));
}

absl::StatusOr<std::string> Supervisor::RequestCheckpoint(absl::Time now, absl::string_view job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  Job& job = *it->second;
  JobControl& control = ControlFor(job);
  if (control.state != JobState::kRunning || job.max_step() < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", JobStateName(control.state),
        job.max_step() < 0 ? " and has made no step yet" : "", ": no step to checkpoint at"));
  }
  const double step_s = ComputeJobStepStats(job).median_rank_p50_s;
  if (step_s <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no measured step time yet (it needs two steps); try again shortly"));
  }
  const int64_t horizon = std::max<int64_t>(
      kMinHorizonSteps,
      static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(options_.plan_horizon) / step_s)));
  const int64_t step = job.max_step() + horizon;
  // The same periodic schedule, plus the one-off step.
  CheckpointPlanSpec spec;
  if (!control.plans.empty()) spec = control.plans.back();
  spec.one_off_steps = {step};
  Publish(now, job, spec,
          absl::StrFormat("checkpoint requested by an operator at step %d (in about %.0fs)", step,
                          horizon * step_s),
          {{"one_off_step", static_cast<double>(step)}});
  return absl::StrFormat("job %s will checkpoint at step %d (in about %.0fs)",
                         std::string(job_id), step, horizon * step_s);
}

}  // namespace trainsup
