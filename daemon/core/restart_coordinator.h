#ifndef TRAINSUP_DAEMON_CORE_RESTART_COORDINATOR_H_
#define TRAINSUP_DAEMON_CORE_RESTART_COORDINATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/events.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Drives a job through its lifecycle (job_state.h): a failure stops it on
// every node, then the next generation starts everywhere but on quarantined
// nodes, after a backoff, or the job is held when the restart governor says
// so; a job whose every node exited 0 is finished. Each move is an event and
// a journaled record. Thread-compatible.
class RestartCoordinator {
 public:
  RestartCoordinator(const SupervisorOptions& options, AgentRegistry& agents,
                     const QuarantinePolicy& quarantine, Decisions& decisions)
      : options_(options), agents_(agents), quarantine_(quarantine), decisions_(decisions) {}
  RestartCoordinator(const RestartCoordinator&) = delete;
  RestartCoordinator& operator=(const RestartCoordinator&) = delete;

  // Moves `job` to `to` for `reason`: an event and a journaled record.
  // FailedPrecondition, and the job stays where it is, when the transition
  // table does not allow the move (counted in refused_transitions()).
  absl::Status Transition(absl::Time now, JobEntry& job, JobState to, const std::string& reason);
  // Journals the job's record (its state, MTBF exposure and failures,
  // restarts and measures) as of `now`; an ended job's picture too.
  void JournalJob(absl::Time now, JobEntry& job);

  // A failure at `failed_at` was decided on at `now`: stop the job on every
  // node, then restart it, or hold it for `hold` when set. Only a pending or
  // running job is stopped; otherwise a restart is already under way and
  // this does nothing.
  void BeginRestart(absl::Time now, JobEntry& job, absl::Time failed_at, const std::string& cause,
                    const std::optional<HoldCause>& hold = std::nullopt);
  // A kill criterion was met at `now`: stop the job on every node, then
  // leave it killed for `reason` (not restarted until an operator resumes
  // it). Only a pending or running job is stopped; false otherwise.
  bool BeginKill(absl::Time now, JobEntry& job, const std::string& reason);
  // Stopping: once every agent that can be heard has stopped (or the stop
  // timed out), restart after the governor's backoff, or hold the job (at
  // the restart cap, or when its failure is the training code's own). An
  // agent that cannot be heard is not waited for: it cannot stop.
  void SweepStopping(absl::Time now, JobEntry& job);
  // Restarting: starts the next generation once the backoff is over, on
  // every node that can be heard and is not quarantined, and without the
  // node a restart-elsewhere verdict named when the others make at least
  // the job's minimum (its agents' min_nodes). Those are its members; a
  // node cut from it joins only a later generation.
  void SweepRestarting(absl::Time now, JobEntry& job);
  // Running: once the generation made its first step, says whether the world
  // size changed and how long the recovery took (it becomes a measured R).
  void TrackRecovery(absl::Time now, JobEntry& job);
  // Running: finished when every node of the generation exited 0 (a node
  // left out of it by a verdict is not waited for).
  void CheckFinished(absl::Time now, JobEntry& job);
  // The operator lifted a hold, a kill (or a failure): the restart cap forgets what
  // came before, and the next generation starts now. FailedPrecondition for
  // a finished job, and for one no agent waits to run (AgentsWaiting).
  absl::StatusOr<std::string> Resume(absl::Time now, JobEntry& job);

  // Transitions the table refused since start (0 unless a rule is wrong).
  uint64_t refused_transitions() const { return refused_transitions_; }

 private:
  void StartNextGeneration(absl::Time now, JobEntry& job);
  // Takes the node a restart-elsewhere verdict named out of `members` when
  // the job can run without it; says which in `left_out`.
  void LeaveOut(JobEntry& job, std::vector<NodeIndex>& members, LeftOutNodes& left_out) const;
  // Stopped for good until an operator resumes it.
  void Hold(absl::Time now, JobEntry& job, const HoldCause& cause);

  const SupervisorOptions& options_;
  AgentRegistry& agents_;
  const QuarantinePolicy& quarantine_;
  Decisions& decisions_;
  uint64_t refused_transitions_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RESTART_COORDINATOR_H_
