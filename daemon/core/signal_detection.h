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
// non-finite failure repeats at the same step in the next generation), and
// the next generations resume below it. The registry's rules (signal_rules.h)
// go out as their findings say: an event, and for kChargeNode (a replica
// mismatch) a failure charged to the node toward its quarantine. A non-finite loss soon after a load counts against
// the checkpoint loaded, and a loss shift rolls back with
// on_loss_spike=rollback (checkpoint_fallback.h). A
// kill criterion met (kill_criteria.h: fed the generation's step losses and
// the loss shifts) stops the job on every node and leaves it killed, unless
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
  // With on_loss_spike=rollback: the job restarts before the spike,
  // skipping its batches, or is held past the cap (checkpoint_fallback.h).
  bool OnLossSpike(absl::Time now, JobEntry& job, const LossShiftFinding& f);
  // The hook for a resume spike at `step` (a loss at resume far above the
  // loss before the failure): it counts against the checkpoint the
  // generation loaded, as a non-finite loss does; only the second in a row
  // (a fallback, or the hold past the cap) stops the job. Returns true when
  // it did.
  bool OnResumeSpike(absl::Time now, JobEntry& job, int64_t step);
  // Feeds the job's kill criteria; true when one stopped the job.
  bool SweepKill(absl::Time now, JobEntry& job, const std::optional<LossShiftFinding>& shift);
  // Emits a registry rule's finding and does what its action says.
  void Act(absl::Time now, JobEntry& job, SignalFinding& f);
  // Adds to a throughput event the GPUs of the job (of its node, when it
  // names one) that run slowed now, with why and since when.
  void NoteSlowedGpus(absl::Time now, const JobEntry& job, Event& e) const;
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
