#ifndef TRAINSUP_DAEMON_CORE_SIGNAL_DETECTION_H_
#define TRAINSUP_DAEMON_CORE_SIGNAL_DETECTION_H_

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/restart_coordinator.h"
#include "daemon/core/signals/signal_monitor.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Runs a job's training-signal rules (SignalMonitor) at the sweep and turns
// what they found into events naming the rank and node, and into what is
// done about it: a non-finite loss stops the generation on every node and
// restarts it from its last checkpoint (--on-non-finite, through the
// FailureHandler like any job-killing failure; held instead when the same
// non-finite failure repeats at the same step in the next generation); a
// replica mismatch is charged to its node toward quarantine; a kill
// criterion met (kill_criteria.h: fed the generation's step losses and the
// loss shifts) stops the job on every node and leaves it killed, unless
// observe-only (--observe-only, or the job's criteria say so). Every other
// finding is an event only. Thread-compatible.
class SignalDetection {
 public:
  SignalDetection(const SupervisorOptions& options, const AgentRegistry& agents,
                  Decisions& decisions, FailureHandler& failures, RestartCoordinator& restarts)
      : options_(options),
        agents_(agents),
        decisions_(decisions),
        failures_(failures),
        restarts_(restarts) {}
  SignalDetection(const SignalDetection&) = delete;
  SignalDetection& operator=(const SignalDetection&) = delete;

  // Returns true when a finding stopped the job (it is restarting or held).
  bool Sweep(absl::Time now, JobEntry& job);

 private:
  bool OnNonFinite(absl::Time now, JobEntry& job, const NonFiniteFinding& f);
  // Feeds the job's kill criteria; true when one stopped the job.
  bool SweepKill(absl::Time now, JobEntry& job, const std::optional<LossShiftFinding>& shift);
  void OnReplica(absl::Time now, JobEntry& job, const ReplicaFinding& f);
  // The name of the node `rank` reports from ("" when none).
  const std::string& NodeOfRank(const JobEntry& job, uint32_t rank) const;

  const SupervisorOptions& options_;
  const AgentRegistry& agents_;
  Decisions& decisions_;
  FailureHandler& failures_;
  RestartCoordinator& restarts_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNAL_DETECTION_H_
