#ifndef TRAINSUP_DAEMON_CORE_READ_MODEL_H_
#define TRAINSUP_DAEMON_CORE_READ_MODEL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/early_failure.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_planner.h"
#include "daemon/core/job_view.h"
#include "daemon/core/quarantine_policy.h"

namespace trainsup {

// Fills the read model (job_view.h) from the core's state: what was
// observed, the verdicts and figures the sweep left in each job's entry, the
// lifecycle, plans, costs and ledger. A job's view costs nothing per rank:
// what a rule measures over the ranks was measured at the sweep. Only the
// rank rows and the nodes' rank counts walk ranks. Const: readers may share
// it. Thread-compatible.
class ReadModel {
 public:
  ReadModel(const AgentRegistry& agents, const QuarantinePolicy& quarantine,
            const JobTable& jobs, const JobPlanner& planner, const VerdictCounts& verdicts,
            const EarlyFailureCounts& early_failures)
      : agents_(agents),
        quarantine_(quarantine),
        jobs_(jobs),
        planner_(planner),
        verdicts_(verdicts),
        early_failures_(early_failures) {}
  ReadModel(const ReadModel&) = delete;
  ReadModel& operator=(const ReadModel&) = delete;

  JobView JobViewOf(const JobEntry& job, absl::Time now) const;
  // Every job, by id.
  std::vector<JobView> JobViews(absl::Time now) const;
  // The ranks of `job` heard from in its current generation, by rank, into
  // `*rows` and the texts they point to into `*texts` (both emptied first).
  // One pass over the job's ranks.
  void RankViewsOf(const JobEntry& job, std::vector<RankView>* rows,
                   std::vector<RankTexts>* texts) const;
  // In the order nodes were first heard of (a RankView's node indexes it).
  std::vector<NodeView> NodeViews() const;
  ClusterView Cluster(absl::Time now) const;
  // The stacks of `job`'s generation `generation` (0: the latest with
  // stacks), grouped; nullopt when there are none.
  std::optional<StacksView> StacksOf(const JobEntry& job, uint64_t generation) const;

 private:
  const AgentRegistry& agents_;
  const QuarantinePolicy& quarantine_;
  const JobTable& jobs_;
  const JobPlanner& planner_;
  const VerdictCounts& verdicts_;
  const EarlyFailureCounts& early_failures_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_READ_MODEL_H_
