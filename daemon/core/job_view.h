#ifndef TRAINSUP_DAEMON_CORE_JOB_VIEW_H_
#define TRAINSUP_DAEMON_CORE_JOB_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/job_costs.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/mtbf_estimator.h"

namespace trainsup {

// What the adapters (metrics, the operator service) render about a job: the
// entry itself (observations, verdicts, lifecycle, plans, ledger) and every
// figure a rule derives from it, computed once by the core, so that no
// adapter recomputes a rule. Valid until the core next changes.
struct JobView {
  const JobEntry* entry = nullptr;
  JobStepStats step_stats;  // median over ranks of each rank's p50 / p99
  // The stall threshold in force now; absent before any rank reported.
  std::optional<absl::Duration> stall_threshold;
  uint32_t nodes = 0;  // nodes whose agent speaks for the job
  MtbfEstimate mtbf;
  CostFigure checkpoint_cost;  // C
  CostFigure restart_cost;     // R
  double checkpoint_async_s = 0;
  // The next step any plan makes a checkpoint step; -1 when none.
  int64_t next_checkpoint_step = -1;
};

// A node as the adapters render it.
struct NodeView {
  const NodeRecord* record = nullptr;
  uint32_t ranks = 0;  // ranks of the node's job that reported from it
  bool quarantined = false;
  std::string quarantine_reason;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_VIEW_H_
