#include "daemon/core/state_restore.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "daemon/core/ended_job.h"

namespace trainsup {
namespace {

void RestoreJobs(absl::Time now, const PersistedState& state, const SupervisorOptions& options,
                 JobTable& jobs) {
  for (const JobRow& row : state.jobs) {
    JobEntry& job = jobs.FindOrAdd(row.job);
    job.job().ObserveGeneration(now, row.generation);
    job.SyncGeneration();
    JobLifecycle& life = job.mutable_lifecycle();
    life.state = JobStateFromName(row.state).value_or(JobState::kPending);
    life.reason = row.reason;
    life.since = row.changed;
    // A job that ended long ago leaves memory at the first sweep; any other
    // waits --job-retention for its agents to come back.
    job.NoteHeard(HasEnded(life.state) ? row.changed : now);
    job.NoteRestored(now);
    life.last_world_size = row.world_size;
    if (row.restarts_forgiven_before != absl::InfinitePast()) {
      life.governor.Forgive(row.restarts_forgiven_before);
    }
    job.mutable_costs().RestoreExposure(row.exposure_seconds, life.state == JobState::kRunning,
                                        now);
    job.mutable_costs().RestoreFailures(
        static_cast<int>(std::min<uint64_t>(row.failures, INT_MAX)));
    life.restarts = row.restarts;
    // A restart that was under way goes on from where it was; so does a
    // stop for a kill criterion (its reason says so).
    life.stop_deadline = now + options.stop_timeout;
    life.restart_at = now;
    if (life.state == JobState::kStopping && IsKillReason(row.reason)) {
      life.kill_after_stop = row.reason;
    }
  }
  for (const KillCriteriaRow& row : state.kill_criteria) {
    JobEntry* job = jobs.Find(row.job);
    if (job == nullptr || !row.spec || !CheckKillCriteria(*row.spec).ok()) continue;
    if (row.source == "operator") {
      job->mutable_kill().SetOperator(row.spec);
    } else {
      job->mutable_kill().SetScript(*row.spec);
    }
  }
  for (const JobMeasuresRow& row : state.measures) {
    JobEntry* job = jobs.Find(row.job);
    if (job == nullptr) continue;
    job->mutable_ledger() = GoodputLedger::FromState(row.ledger);
    job->mutable_costs().RestoreSamples(
        {row.checkpoint_costs, row.checkpoint_async, row.restart_costs});
  }
  for (const FallbackRow& row : state.fallbacks) {
    if (JobEntry* job = jobs.Find(row.job); job != nullptr) {
      job->mutable_fallback().Restore(row.state);
    }
  }
  for (const StackRow& row : state.stacks) {  // oldest first
    JobEntry* job = jobs.Find(row.job);
    if (job == nullptr) continue;
    JobStacks& set = job->mutable_stacks().For(row.generation, row.time, row.event_id, row.culprit);
    set.collect_seconds = std::max(set.collect_seconds, row.collect_seconds);
    set.by_rank[row.rank] = {row.node, row.answered, row.text};
  }
  for (const EventCountRow& row : state.event_counts) {
    if (JobEntry* job = jobs.Find(row.job); job != nullptr) {
      job->RestoreEventCount(row.kind, row.count);
    }
  }
  for (const RestartRow& row : state.restarts) {
    if (JobEntry* job = jobs.Find(row.job); job != nullptr) {
      job->mutable_lifecycle().governor.RecordRestart(row.time);
    }
  }
  // Stores written before resumes were kept with the job know them only as
  // events.
  for (const Event& e : state.events) {
    if (e.kind != EventKind::kResume) continue;
    JobEntry* job = jobs.Find(e.job);
    if (job != nullptr && e.time > job->lifecycle().governor.forgiven_before()) {
      job->mutable_lifecycle().governor.Forgive(e.time);
    }
  }
}

}  // namespace

void RestoreState(absl::Time now, const PersistedState& state, const SupervisorOptions& options,
                  AgentRegistry& agents, QuarantinePolicy& quarantine, JobTable& jobs,
                  Decisions& decisions) {
  // When an operator last lifted each node's quarantine: failures before it
  // no longer count (as at run time, where Unquarantine forgets them).
  absl::flat_hash_map<std::string, absl::Time> released;
  for (const NodeRecordRow& row : state.nodes) {
    agents.FindOrAdd(row.name);
    if (row.quarantined) {
      quarantine.Quarantine(row.name, row.reason);
    } else {
      released[row.name] = row.changed;
    }
  }
  RestoreJobs(now, state, options, jobs);
  RestoreEndedJobs(state, options, agents, jobs);
  for (const FailureRow& row : state.failures) {
    // Charged failures inside the window still count towards a quarantine
    // (a job's MTBF counts its job-killing failures kept with its row).
    auto lifted = released.find(row.node);
    if (row.charged && !row.node.empty() && row.time > now - quarantine.options().window &&
        !quarantine.IsQuarantined(row.node) &&
        (lifted == released.end() || row.time > lifted->second)) {
      quarantine.Remember(row.time, row.node, row.message,
                          row.kind == kRestartElsewhereFailure ? Charge::kRestartElsewhere
                                                               : Charge::kFailure);
    }
  }
  decisions.RestoreEvents(state.events);
  // Fences and unfences decided and not seen to succeed (the supervisor
  // died before or while one ran, or it failed) run again: at least once, so
  // idempotent. One the node's state no longer asks for is dropped.
  for (const FenceRow& row : state.fences) {
    const bool wanted = row.action == FenceAction::kFence
                            ? quarantine.IsQuarantined(row.node)
                            : !quarantine.IsQuarantined(row.node) && options.unfence;
    if (wanted) {
      decisions.Fence({row.node, row.reason, row.decided, row.action});
    } else {
      decisions.DropFence(now, row.node);
    }
  }
}

}  // namespace trainsup
