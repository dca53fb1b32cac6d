#ifndef TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_
#define TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/decisions.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Plans one job's checkpoints from what it measured: C and R (JobCosts), the
// MTBF (MtbfEstimator over its exposure and failures) and its step time;
// the planner (checkpoint_planner.h) says how often, the publisher
// (checkpoint_publisher.h) whether and from which step; each plan published
// is announced in a `checkpoint_plan` event. Thread-compatible.
class JobPlanner {
 public:
  JobPlanner(const SupervisorOptions& options, Decisions& decisions)
      : options_(options), mtbf_(options.mtbf), decisions_(decisions) {}
  JobPlanner(const JobPlanner&) = delete;
  JobPlanner& operator=(const JobPlanner&) = delete;

  // Publishes a new periodic plan when the planned interval moved enough.
  void Replan(absl::Time now, JobEntry& job, const JobStepStats& stats);
  // A one-off checkpoint at a step every rank reaches after the horizon.
  // FailedPrecondition when the job is not running or has no step time yet.
  absl::StatusOr<std::string> RequestCheckpoint(absl::Time now, JobEntry& job);

  MtbfEstimate JobMtbf(const JobEntry& job, absl::Time now) const;
  // Over every job's exposure and failures.
  MtbfEstimate ClusterMtbf(const JobTable& jobs, absl::Time now) const;
  CostFigure CheckpointCost(const JobEntry& job) const {
    return job.costs.Checkpoint(options_.checkpoint_cost_prior);
  }
  CostFigure RestartCost(const JobEntry& job) const {
    return job.costs.Restart(options_.restart_cost_prior);
  }

 private:
  void Publish(absl::Time now, JobEntry& job, CheckpointPlanSpec spec, const std::string& why,
               std::vector<std::pair<std::string, double>> figures);

  const SupervisorOptions& options_;
  const MtbfEstimator mtbf_;
  Decisions& decisions_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_
