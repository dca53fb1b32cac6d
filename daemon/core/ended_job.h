#ifndef TRAINSUP_DAEMON_CORE_ENDED_JOB_H_
#define TRAINSUP_DAEMON_CORE_ENDED_JOB_H_

#include "daemon/core/agent_registry.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_state.h"
#include "daemon/core/journal.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// What an ended job showed, kept across the supervisor's own restarts: the
// agents that would say it again are gone, so what `jobs`, `job`, `ranks`,
// `nodes` and /metrics showed of a finished job must come back from the
// store (journal.h: EndedJobRow, EndedNodeRow, EndedRankRow).

// Finished or failed: no generation of it runs any more.
bool HasEnded(JobState state);

// Journals `job` as it shows now: its totals and plans, and every node of
// it and every rank heard of (replacing the picture journaled before).
void JournalEndedJob(const JobEntry& job, const AgentRegistry& agents, Journal& journal);

// Journals node `index` of `job` and the ranks that last reported from it,
// as they show now (its agent left after the job ended).
void JournalEndedNode(const JobEntry& job, const AgentRegistry& agents, NodeIndex index,
                      Journal& journal);

// Puts back what each ended job of `state` showed when it ended: its totals,
// plans (and the planner's figures behind them), training signals, nodes and
// ranks. A picture is put back only for a job restored as ended at the
// generation it shows.
// When a node shows in several, the job that ended last has it. Run after
// the jobs are restored, before any agent speaks.
void RestoreEndedJobs(const PersistedState& state, const SupervisorOptions& options,
                      AgentRegistry& agents, JobTable& jobs);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_ENDED_JOB_H_
