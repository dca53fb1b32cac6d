#ifndef TRAINSUP_DAEMON_CORE_STATE_RESTORE_H_
#define TRAINSUP_DAEMON_CORE_STATE_RESTORE_H_

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/journal.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Puts back what the state store kept, at start-up, before any agent speaks:
// quarantined nodes, the failures that still count toward a quarantine, each
// job's lifecycle state, MTBF exposure and failures, its restarts (their
// count, and the recent ones for the restart cap, with any operator resume),
// its events by kind, which checkpoint its generations must load
// (checkpoint_fallback.h), what an ended job showed when it ended (ended_job.h),
// the recent events, and the fences still pending (decided again, to be run
// again). A restart
// that was under way goes on from where it was; the time this supervisor was
// down is not counted as exposure (nobody watched it).
void RestoreState(absl::Time now, const PersistedState& state, const SupervisorOptions& options,
                  AgentRegistry& agents, QuarantinePolicy& quarantine, JobTable& jobs,
                  Decisions& decisions);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STATE_RESTORE_H_
