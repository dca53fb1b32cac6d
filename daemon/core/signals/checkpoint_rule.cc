#include "daemon/core/signals/checkpoint_rule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"

namespace trainsup {

int64_t ScheduleStart(absl::Span<const CheckpointPlanSpec> plans,
                      const CheckpointPlanSpec& in_force) {
  int64_t start = in_force.effective_from_step;
  for (const CheckpointPlanSpec* later = &in_force;;) {
    const CheckpointPlanSpec* before = PlanInForce(plans, later->effective_from_step - 1);
    if (before == nullptr || before->interval_steps <= 0 ||
        before->interval_steps > in_force.interval_steps) {
      return start;
    }
    start = before->effective_from_step;
    later = before;
  }
}

void CheckpointSignal::ObserveStep(const StepSignals& s) {
  if (!first_step_) first_step_ = s.step;
  step_ = std::max(step_, s.step);
  if (s.step_time_s && *s.step_time_s > 0) step_s_ = *s.step_time_s;
}

void CheckpointSignal::ObserveCheckpoint(const CheckpointOutcome& c) {
  if (c.committed) {
    committed_before_ = committed_;
    committed_ = c.step;
    return;
  }
  // An asynchronous write that failed after its blocking part had ended
  // everywhere: the checkpoint taken for committed is not.
  if (committed_ == c.step) {
    committed_ = committed_before_;
    committed_before_.reset();
  }
  // Another rank's report of the same save.
  if (std::find(failed_reported_.begin(), failed_reported_.end(), c.step) != failed_reported_.end()) {
    return;
  }
  failed_reported_.push_back(c.step);
  if (failed_reported_.size() > kFailedStepsKept) failed_reported_.pop_front();
  failed_.push_back(c);
}

int64_t CheckpointSignal::Since(int64_t plan_from) const {
  int64_t since = std::max(*first_step_ - 1, plan_from);
  if (committed_) since = std::max(since, *committed_);
  return since;
}

void CheckpointSignal::Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) {
  for (const CheckpointOutcome& f : failed_) {
    out.push_back(Report(CheckpointFailedEvent(sweep.now, sweep.event_job, f,
                                               sweep.node_name(f.at.node), committed_, step_)));
  }
  failed_.clear();
  const CheckpointPlanSpec* plan = first_step_ ? PlanInForce(sweep.plans, step_) : nullptr;
  if (plan == nullptr || plan->interval_steps <= 0) {
    interval_ = 0;  // no plan yet, or one of one-off checkpoints only
    return;
  }
  interval_ = plan->interval_steps;
  plan_from_ = ScheduleStart(sweep.plans, *plan);
  const int64_t since = Since(plan_from_);
  const double limit = options_.factor * static_cast<double>(interval_);
  if (!options_.enabled || static_cast<double>(step_ - since) <= limit) return;
  if (overdue_reported_ == since) return;  // this stretch was reported
  overdue_reported_ = since;
  out.push_back(Report(
      CheckpointOverdueEvent(sweep.now, sweep.event_job, {step_, since, interval_, limit, step_s_})));
}

void CheckpointSignal::Gauges(std::vector<std::pair<std::string, double>>& out) const {
  if (interval_ <= 0 || !first_step_) return;
  const double age = static_cast<double>(step_ - Since(plan_from_));
  out.emplace_back("checkpoint_age_steps", age);
  out.emplace_back("checkpoint_planned_steps", static_cast<double>(interval_));
  if (options_.enabled) {
    out.emplace_back("checkpoint_overdue",
                     age > options_.factor * static_cast<double>(interval_) ? 1 : 0);
  }
}

void CheckpointSignal::MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) {
  for (CheckpointOutcome& f : failed_) move(f.at.node);
}

Event CheckpointFailedEvent(absl::Time time, const EventJob& job, const CheckpointOutcome& failed,
                            const std::string& node, std::optional<int64_t> committed,
                            int64_t step) {
  Event e;
  e.time = time;
  e.kind = EventKind::kCheckpointFailed;
  e.job = job.id;
  e.generation = job.generation;
  e.rank = failed.at.rank;
  e.node = node;
  e.message = absl::StrCat("rank ", failed.at.rank, " on ", node.empty() ? "?" : node,
                           " failed to save the checkpoint of step ", failed.step, ": ",
                           failed.error);
  e.figures = {{"step", static_cast<double>(failed.step)},
               {"job_step", static_cast<double>(step)}};
  if (committed) {
    const int64_t age = std::max<int64_t>(0, step - *committed);
    absl::StrAppend(&e.message, "; the last committed checkpoint is step ", *committed, ", ",
                    age, " steps ago");
    e.figures.emplace_back("last_checkpoint_step", static_cast<double>(*committed));
    e.figures.emplace_back("age_steps", static_cast<double>(age));
  } else {
    absl::StrAppend(&e.message, "; no checkpoint was committed in this generation");
  }
  return e;
}

Event CheckpointOverdueEvent(absl::Time time, const EventJob& job,
                             const CheckpointOverdueFinding& f) {
  Event e;
  e.time = time;
  e.kind = EventKind::kCheckpointOverdue;
  e.job = job.id;
  e.generation = job.generation;
  const int64_t age = f.step - f.since;
  e.message = absl::StrCat("no checkpoint committed for ", age, " steps (since step ", f.since,
                           "; the plan checkpoints every ", f.interval,
                           " steps, overdue past ", absl::StrFormat("%g", f.limit),
                           "): a failure now would lose those ", age, " steps");
  e.figures = {{"step", static_cast<double>(f.step)},
               {"since_step", static_cast<double>(f.since)},
               {"age_steps", static_cast<double>(age)},
               {"interval_steps", static_cast<double>(f.interval)},
               {"limit_steps", f.limit}};
  if (f.step_s > 0) {
    const double lost_s = static_cast<double>(age) * f.step_s;
    absl::StrAppend(&e.message, " (", HumanSeconds(lost_s), " of training)");
    e.figures.emplace_back("lost_seconds", lost_s);
  }
  return e;
}

}  // namespace trainsup
