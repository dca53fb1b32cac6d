#ifndef TRAINSUP_DAEMON_CORE_JOB_COSTS_H_
#define TRAINSUP_DAEMON_CORE_JOB_COSTS_H_

#include <vector>

#include "absl/time/time.h"
#include "daemon/core/step_window.h"

namespace trainsup {

// A cost the checkpoint planner uses: measured, or the prior until measured.
struct CostFigure {
  double seconds = 0;
  bool measured = false;
};

// What a job's failures, checkpoints and restarts cost, as measured: the
// inputs of the checkpoint planner (C, R, and the MTBF's exposure and
// failures). Recent values only, so a job that got faster plans faster.
// Pure; thread-compatible.
class JobCosts {
 public:
  JobCosts() = default;

  // A rank's checkpoint: seconds the loop was blocked, and seconds the write
  // went on in the background (0: synchronous). Zeros are not samples.
  void AddCheckpoint(double blocking_s, double async_s);
  // A recovery: failure -> first step of the next generation.
  void AddRestart(double seconds);

  // C: median blocking seconds of recent checkpoints, else `prior`.
  CostFigure Checkpoint(absl::Duration prior) const;
  // R: median of recent recoveries, else `prior`.
  CostFigure Restart(absl::Duration prior) const;
  // Median background write seconds of recent checkpoints; 0 when none.
  double AsyncWrite() const;

  // Exposure for the MTBF: the time the job spends running.
  void StartRunning(absl::Time now);
  void StopRunning(absl::Time now);
  double ExposureSeconds(absl::Time now) const;
  // Puts back the exposure kept in the state store; running from `now` when
  // `running`.
  void RestoreExposure(double seconds, bool running, absl::Time now);

  // The recent samples of C, of the background writes and of R, oldest
  // first, to keep them across a supervisor restart; and back.
  struct Samples {
    std::vector<double> checkpoint_blocking;
    std::vector<double> checkpoint_async;
    std::vector<double> restarts;
  };
  Samples samples() const;
  void RestoreSamples(const Samples& samples);

  // Job-killing failures (crashes, stalls, lost nodes) counted in the MTBF.
  void AddFailure() { ++failures_; }
  int failures() const { return failures_; }
  // Puts back the count kept in the state store.
  void RestoreFailures(int failures) { failures_ = failures; }

 private:
  StepWindow checkpoint_blocking_{32};
  StepWindow checkpoint_async_{32};
  StepWindow restarts_{16};
  double exposure_seconds_ = 0;  // before running_since_
  absl::Time running_since_ = absl::InfinitePast();
  int failures_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_COSTS_H_
