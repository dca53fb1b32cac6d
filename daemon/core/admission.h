#ifndef TRAINSUP_DAEMON_CORE_ADMISSION_H_
#define TRAINSUP_DAEMON_CORE_ADMISSION_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/restart_coordinator.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// A failed health check as a quarantine's reason, on one line: "preflight
// failed (exit code 1 after 2.3s): <the last line it wrote>".
std::string PreflightReason(const PreflightInfo& preflight);

// Lets agents in, and their jobs into the lifecycle: whether a hello may be
// served (one agent per node, the limits, generations and plans only as this
// supervisor gave them), and what it means for the job: a new job (pending,
// journaled), a generation adopted from the agent when this supervisor has
// lost its state, a finished or failed job run again by new agents (a new
// generation and ledger), the plans the agent holds, whether it launches now
// or waits for a start, and whether its node is a member of the generation
// that runs. Then the generation runs once its ranks report.
// Thread-compatible.
class Admission {
 public:
  Admission(const SupervisorOptions& options, AgentRegistry& agents,
            const QuarantinePolicy& quarantine, JobTable& jobs, RestartCoordinator& restarts)
      : options_(options),
        agents_(agents),
        quarantine_(quarantine),
        jobs_(jobs),
        restarts_(restarts) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Whether `hello` may be served. InvalidArgument on a bad node name or job
  // id, or a verdict rule the agent passed on that is not one; AlreadyExists while another agent (another incarnation) serves the
  // node and is heard; ResourceExhausted for a new node (job) past
  // --max-nodes (--max-jobs), counted; FailedPrecondition for a generation or
  // a checkpoint plan this supervisor never gave the job.
  absl::Status Check(absl::Time now, const AgentHelloInfo& hello);

  struct Admitted {
    JobEntry* job = nullptr;
    // Whether an agent that has not launched yet launches now (false: it
    // waits for a start command).
    bool launch = false;
    // Where it meets when it launches now (unset: as its command says), and
    // whether its joining decided where the generation meets.
    std::optional<RendezvousSpec> rendezvous;
    bool rendezvous_decided = false;
  };
  // Admits the agent of `hello`, connected now as `node`: creates, adopts or
  // runs its job again, and decides its launch and membership.
  // REQUIRES: Check(now, hello) was OK and the registry connected `node` for
  // it.
  Admitted Admit(absl::Time now, const AgentHelloInfo& hello, NodeIndex node);

  // A report was applied to `job`: a pending job whose generation's ranks
  // report now runs. Returns true when it moved. O(1).
  bool NoticeReport(absl::Time now, JobEntry& job);

  // Hellos of new jobs (nodes) refused past --max-jobs (--max-nodes).
  uint64_t jobs_refused() const { return jobs_refused_; }
  uint64_t nodes_refused() const { return nodes_refused_; }

 private:
  absl::Status CheckNodeFree(absl::Time now, const AgentHelloInfo& hello) const;
  // Whether a new node or job may be held; counts the refusals.
  absl::Status CheckLimits(const AgentHelloInfo& hello);
  // Whether the hello's generation and plans are ones this supervisor can
  // have given the job.
  absl::Status CheckJob(const AgentHelloInfo& hello) const;

  const SupervisorOptions& options_;
  AgentRegistry& agents_;
  const QuarantinePolicy& quarantine_;
  JobTable& jobs_;
  RestartCoordinator& restarts_;
  uint64_t jobs_refused_ = 0;
  uint64_t nodes_refused_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_ADMISSION_H_
