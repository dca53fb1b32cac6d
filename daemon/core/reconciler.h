#ifndef TRAINSUP_DAEMON_CORE_RECONCILER_H_
#define TRAINSUP_DAEMON_CORE_RECONCILER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/quarantine_policy.h"

namespace trainsup {

// Compares what a job's lifecycle wants of each of its agents with what the
// agent reports, and sends each connected agent the commands that close the
// gap, once per stream (NodeRecord::told): the checkpoint plans in order, a
// quarantine notice, a stop, a start of the current generation, a hold.
// Thread-compatible.
class Reconciler {
 public:
  Reconciler(absl::Duration stop_grace, AgentRegistry& agents, const QuarantinePolicy& quarantine,
             Decisions& decisions)
      : stop_grace_(stop_grace), agents_(agents), quarantine_(quarantine), decisions_(decisions) {}
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;

  void Reconcile(const JobEntry& job);

 private:
  void Command(const NodeRecord& node, AgentCommand::Kind kind, uint64_t generation,
               const std::string& reason, bool collect_stacks = false,
               std::optional<RendezvousSpec> rendezvous = std::nullopt,
               ResumeAdvice resume = {});
  void SendPlans(const JobEntry& job, NodeRecord& node);

  const absl::Duration stop_grace_;
  AgentRegistry& agents_;
  const QuarantinePolicy& quarantine_;
  Decisions& decisions_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RECONCILER_H_
