#include "calc/checkpoint_planner.h"

#include "common/format.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace trainsup {

namespace {

absl::Status CheckFinite(double value, bool allow_zero, const char* what) {
  if (std::isfinite(value) && (value > 0 || (allow_zero && value == 0))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s must be a finite number of seconds %s, got %g", what, allow_zero ? ">= 0" : "> 0", value));
}

constexpr double kSensitivityFactors[] = {0.25, 0.5, 1, 2, 4};

}  // namespace

double YoungIntervalSeconds(double checkpoint_seconds, double mtbf_seconds) {
  return std::sqrt(2 * checkpoint_seconds * mtbf_seconds);
}

double DalyIntervalSeconds(double checkpoint_seconds, double mtbf_seconds) {
  const double c = checkpoint_seconds;
  const double m = mtbf_seconds;
  if (c >= 2 * m) return m;
  const double ratio = c / (2 * m);
  return std::sqrt(2 * c * m) * (1 + std::sqrt(ratio) / 3 + ratio / 9) - c;
}

CheckpointWaste ExpectedWaste(double interval_seconds, double checkpoint_seconds,
                              double mtbf_seconds, double restart_seconds) {
  CheckpointWaste w;
  w.interval_seconds = interval_seconds;
  w.write_tax_fraction = checkpoint_seconds / interval_seconds;
  w.rework_fraction = (interval_seconds / 2 + restart_seconds) / mtbf_seconds;
  w.total_waste_fraction = w.write_tax_fraction + w.rework_fraction;
  w.goodput_fraction = 1 - w.total_waste_fraction;
  return w;
}

CheckpointCost SplitWriteCost(double write_seconds, int writers, double async_snapshot_seconds) {
  const double write = write_seconds / (writers >= 1 ? writers : 1);
  CheckpointCost cost;
  if (async_snapshot_seconds > 0) {
    cost.blocking_seconds = async_snapshot_seconds;
    cost.async_write_seconds = write;
  } else {
    cost.blocking_seconds = write;
  }
  return cost;
}

const char* CheckpointVerdictName(CheckpointVerdict verdict) {
  switch (verdict) {
    case CheckpointVerdict::kCheckpointEvery:
      return "checkpoint-every";
    case CheckpointVerdict::kCheckpointAtEnd:
      return "checkpoint-at-end";
    case CheckpointVerdict::kNoPositiveGoodput:
      return "no-positive-goodput";
  }
  return "unknown";
}

absl::StatusOr<CheckpointPlan> PlanCheckpoints(const CheckpointPlanInputs& in) {
  if (absl::Status s = CheckFinite(in.checkpoint_seconds, false, "checkpoint cost"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFinite(in.mtbf_seconds, false, "MTBF"); !s.ok()) return s;
  if (absl::Status s = CheckFinite(in.restart_seconds, true, "restart cost"); !s.ok()) return s;
  if (absl::Status s = CheckFinite(in.async_write_seconds, true, "asynchronous write time");
      !s.ok()) {
    return s;
  }
  if (in.run_seconds.has_value()) {
    if (absl::Status s = CheckFinite(*in.run_seconds, false, "run length"); !s.ok()) return s;
  }

  const double c = in.checkpoint_seconds;
  const double m = in.mtbf_seconds;
  const double r = in.restart_seconds;
  const double a = in.async_write_seconds;

  CheckpointPlan plan;
  plan.inputs = in;
  plan.young_interval_seconds = YoungIntervalSeconds(c, m);
  plan.daly_interval_seconds = DalyIntervalSeconds(c, m);
  plan.at_young = ExpectedWaste(plan.young_interval_seconds, c, m, r);
  for (double factor : kSensitivityFactors) {
    CheckpointSensitivityRow row;
    row.factor = factor;
    row.waste = ExpectedWaste(factor * plan.young_interval_seconds, c, m, r);
    row.write_overlaps_next = row.waste.interval_seconds < a;
    plan.sensitivity.push_back(row);
  }
  if (c >= 2 * m) {
    plan.warnings.push_back(absl::StrFormat(
        "Daly's formula needs a checkpoint cost below 2 x MTBF (%s >= 2 x %s); his interval is "
        "then the MTBF",
        HumanSeconds(c), HumanSeconds(m)));
  }

  // W is convex in T with its minimum at T*: when the asynchronous write
  // forbids T*, the best feasible interval is A.
  plan.interval_seconds = plan.young_interval_seconds;
  if (plan.interval_seconds < a) {
    plan.warnings.push_back(absl::StrFormat(
        "a write would still be running when the next is due: the best interval %s is shorter "
        "than the asynchronous write %s; the interval is raised to %s",
        HumanSeconds(plan.interval_seconds), HumanSeconds(a), HumanSeconds(a)));
    plan.interval_seconds = a;
  }
  plan.at_interval = ExpectedWaste(plan.interval_seconds, c, m, r);

  if (plan.at_interval.total_waste_fraction >= 1) {
    plan.verdict = CheckpointVerdict::kNoPositiveGoodput;
    plan.verdict_text = absl::StrFormat(
        "no interval gives positive goodput on this infrastructure: even the best interval (%s) "
        "loses %s of wall time (write tax %s, rework and restart %s)",
        HumanSeconds(plan.interval_seconds), Percent(plan.at_interval.total_waste_fraction),
        Percent(plan.at_interval.write_tax_fraction), Percent(plan.at_interval.rework_fraction));
  } else if (in.run_seconds.has_value() && plan.interval_seconds >= *in.run_seconds) {
    plan.verdict = CheckpointVerdict::kCheckpointAtEnd;
    plan.verdict_text = absl::StrFormat(
        "checkpoint once at the end: the best interval (%s) is not shorter than the run (%s)",
        HumanSeconds(plan.interval_seconds), HumanSeconds(*in.run_seconds));
  } else {
    plan.verdict = CheckpointVerdict::kCheckpointEvery;
    plan.verdict_text = absl::StrFormat(
        "checkpoint every %s: expected overhead %s, goodput %s",
        HumanSeconds(plan.interval_seconds),
        Percent(plan.at_interval.total_waste_fraction), Percent(plan.at_interval.goodput_fraction));
  }
  return plan;
}

int64_t IntervalSteps(double interval_seconds, double step_seconds) {
  if (!(step_seconds > 0) || std::isnan(interval_seconds)) return 1;
  const double steps = std::round(interval_seconds / step_seconds);
  if (!(steps >= 1)) return 1;
  // 2^63 is the first double past INT64_MAX.
  if (steps >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(steps);
}

}  // namespace trainsup
