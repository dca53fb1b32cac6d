#ifndef TRAINSUP_DAEMON_CORE_DETECTION_H_
#define TRAINSUP_DAEMON_CORE_DETECTION_H_

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/crash_detector.h"
#include "daemon/core/decisions.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/stall_detector.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Runs the detection rules over a job's current generation and turns their
// verdicts into events (naming the rank and node) and failures for the
// FailureHandler: a crash's first rank to fail, a hang's culprit, a
// persistent straggler. Thread-compatible.
class Detection {
 public:
  Detection(const SupervisorOptions& options, const AgentRegistry& agents, Decisions& decisions,
            FailureHandler& failures)
      : crash_(options.crash),
        stall_(options.stall),
        agents_(agents),
        decisions_(decisions),
        failures_(failures) {}
  Detection(const Detection&) = delete;
  Detection& operator=(const Detection&) = delete;

  // A report was applied: starts the crash settle clock at the first certain
  // failure or failed command of the generation. O(1).
  static void NoticeReport(absl::Time now, JobEntry& job, bool launcher_failed);

  // Each returns true when it found a job-killing failure (and handed it on).
  bool SweepCrash(absl::Time now, JobEntry& job);
  bool SweepStall(absl::Time now, JobEntry& job, const JobStepStats& stats);
  void SweepStragglers(absl::Time now, JobEntry& job);

  const StallDetector& stall() const { return stall_; }

 private:
  // The first node of `job` whose command failed in the job's current
  // generation, if any.
  std::optional<FailedLauncher> FailedLauncherOf(const JobEntry& job) const;

  const CrashDetector crash_;
  const StallDetector stall_;
  const AgentRegistry& agents_;
  Decisions& decisions_;
  FailureHandler& failures_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_DETECTION_H_
