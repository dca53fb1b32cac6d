#ifndef TRAINSUP_CALC_CHECKPOINT_PLANNER_H_
#define TRAINSUP_CALC_CHECKPOINT_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainsup {

// How often to checkpoint, from what failures and checkpoints cost.
//
// Every time below is in seconds (a double; the field names end in
// _seconds), every share of wall time is a fraction in [0, 1] or above (the
// names end in _fraction; 0.162 is 16.2 %). Pure functions; no clock, no I/O.
//
// The model (first order, as in Young 1974): training checkpoints every T
// seconds of work; each checkpoint blocks the loop for C; a job-killing
// failure arrives on average every M seconds, throws away on average T/2 of
// work since the last checkpoint and costs R to come back (failure -> first
// step of the next generation). The share of wall time lost is
//
//     W(T) = C/T + (T/2 + R)/M         goodput = 1 - W(T)
//            ^^^   ^^^^^^^^^^^^
//       write tax   rework + restart
//
// minimised exactly by Young's T* = sqrt(2 C M). Daly's higher-order interval
// is reported next to it: it differs materially only when C is not small
// against M.

// Young (1974): sqrt(2 C M). REQUIRES: C > 0, M > 0.
double YoungIntervalSeconds(double checkpoint_seconds, double mtbf_seconds);

// Daly (2006): sqrt(2CM) [1 + (1/3) sqrt(C/2M) + (1/9) (C/2M)] - C when
// C < 2M, and M otherwise. REQUIRES: C > 0, M > 0.
double DalyIntervalSeconds(double checkpoint_seconds, double mtbf_seconds);

// W(T) and its two parts at one interval.
struct CheckpointWaste {
  double interval_seconds = 0;     // T
  double write_tax_fraction = 0;   // C / T
  double rework_fraction = 0;      // (T/2 + R) / M: re-done work and restart
  double total_waste_fraction = 0; // the sum; may exceed 1
  double goodput_fraction = 0;     // 1 - total; negative when total > 1
};
// REQUIRES: interval > 0, C >= 0, M > 0, R >= 0.
CheckpointWaste ExpectedWaste(double interval_seconds, double checkpoint_seconds,
                              double mtbf_seconds, double restart_seconds);

// How a checkpoint's write splits into what blocks training and what goes on
// in the background.
struct CheckpointCost {
  double blocking_seconds = 0;     // C of the model
  double async_write_seconds = 0;  // A: 0 for a synchronous write
};
// A write of `write_seconds` by one writer, spread over `writers` parallel
// writers, takes write_seconds / writers. Synchronous (snapshot 0): all of it
// blocks. With an asynchronous snapshot (snapshot > 0, e.g. a copy to host
// memory): training blocks for the snapshot only, and the write proper
// (write_seconds / writers) goes on in the background.
// REQUIRES: write_seconds > 0, writers >= 1, snapshot >= 0.
CheckpointCost SplitWriteCost(double write_seconds, int writers,
                              double async_snapshot_seconds);

struct CheckpointPlanInputs {
  // C: how long one checkpoint blocks the training loop. > 0.
  double checkpoint_seconds = 0;
  // M: mean time between job-killing failures (use the MTBF estimator's
  // conservative value). > 0.
  double mtbf_seconds = 0;
  // R: from a failure to the first step of the next generation (detect,
  // stop, respawn, reload). >= 0.
  double restart_seconds = 0;
  // A: how long the write goes on asynchronously after the blocking part; a
  // write must finish before the next starts, so the interval is at least A.
  // 0: synchronous. >= 0.
  double async_write_seconds = 0;
  // L: the run's length, when known. > 0 when set.
  std::optional<double> run_seconds;
};

enum class CheckpointVerdict {
  kCheckpointEvery,     // checkpoint every `interval_seconds`
  kCheckpointAtEnd,     // the interval is not shorter than the run
  kNoPositiveGoodput,   // even the best interval loses all wall time
};
// "checkpoint-every", "checkpoint-at-end", "no-positive-goodput".
const char* CheckpointVerdictName(CheckpointVerdict verdict);

struct CheckpointSensitivityRow {
  double factor = 0;             // interval = factor x Young's T*
  CheckpointWaste waste;
  bool write_overlaps_next = false;  // interval < A: not a feasible schedule
};

struct CheckpointPlan {
  CheckpointPlanInputs inputs;
  double young_interval_seconds = 0;  // T* = sqrt(2 C M)
  double daly_interval_seconds = 0;
  CheckpointWaste at_young;           // W(T*)
  // The planned interval: T* raised to A when the write would still be
  // running at the next checkpoint. Always set, also when the verdict gives
  // no interval (then it is the least bad one).
  double interval_seconds = 0;
  CheckpointWaste at_interval;
  // At 0.25x, 0.5x, 1x, 2x and 4x T*, in that order.
  std::vector<CheckpointSensitivityRow> sensitivity;
  CheckpointVerdict verdict = CheckpointVerdict::kCheckpointEvery;
  std::string verdict_text;  // one line for a human
  std::vector<std::string> warnings;
};

// The plan for `inputs`; InvalidArgument when an input is out of its range
// (or not finite).
absl::StatusOr<CheckpointPlan> PlanCheckpoints(const CheckpointPlanInputs& inputs);

// An interval in seconds as a number of steps of `step_seconds` each:
// max(1, round(interval / step)); saturates at INT64_MAX (an infinite
// interval). REQUIRES: step_seconds > 0 (otherwise, and for a NaN interval,
// the answer is 1).
int64_t IntervalSteps(double interval_seconds, double step_seconds);

}  // namespace trainsup

#endif  // TRAINSUP_CALC_CHECKPOINT_PLANNER_H_
