#ifndef TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_
#define TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Plans one job's checkpoints from what it measured: C and R (JobCosts), the
// MTBF (MtbfEstimator over its exposure and failures) and its step time;
// the planner (checkpoint_planner.h) says how often, the publisher
// (checkpoint_publisher.h) whether and from which step; each plan published
// is announced in a `checkpoint_plan` event. Thread-compatible.
class JobPlanner {
 public:
  JobPlanner(const SupervisorOptions& options, const AgentRegistry& agents,
             const QuarantinePolicy& quarantine, Decisions& decisions)
      : options_(options),
        mtbf_(options.mtbf),
        agents_(agents),
        quarantine_(quarantine),
        decisions_(decisions) {}
  JobPlanner(const JobPlanner&) = delete;
  JobPlanner& operator=(const JobPlanner&) = delete;

  // Publishes a new periodic plan when the planned interval moved enough,
  // and only while every agent of the job can be heard (a plan an agent
  // never gets would make its ranks checkpoint at other steps).
  void Replan(absl::Time now, JobEntry& job, const JobStepStats& stats);
  // Confirms each new plan once every agent of the job holds it, and revokes
  // one that is not held in time (a guard of steps before its first step):
  // the schedule before it stays in force, restated as a newer plan.
  void CheckAcks(absl::Time now, JobEntry& job, const JobStepStats& stats);
  // A one-off checkpoint at a step every rank reaches after the horizon.
  // FailedPrecondition when the job is not running, has no step time yet,
  // or one of its agents cannot be heard.
  absl::StatusOr<std::string> RequestCheckpoint(absl::Time now, JobEntry& job);

  MtbfEstimate JobMtbf(const JobEntry& job, absl::Time now) const;
  // Over every job's exposure and failures.
  MtbfEstimate ClusterMtbf(const JobTable& jobs, absl::Time now) const;
  CostFigure CheckpointCost(const JobEntry& job) const {
    return job.costs().Checkpoint(options_.checkpoint_cost_prior);
  }
  CostFigure RestartCost(const JobEntry& job) const {
    return job.costs().Restart(options_.restart_cost_prior);
  }

 private:
  // The first agent of the job's generation that cannot be heard now, or
  // that does not hold plan `plan_id` (when not 0); kNoNode when none.
  NodeIndex MissingAgent(const JobEntry& job, absl::Time now, uint64_t plan_id) const;

  const SupervisorOptions& options_;
  const MtbfEstimator mtbf_;
  const AgentRegistry& agents_;
  const QuarantinePolicy& quarantine_;
  Decisions& decisions_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_PLANNER_H_
