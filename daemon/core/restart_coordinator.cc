#include "daemon/core/restart_coordinator.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "daemon/core/ended_job.h"
#include "daemon/core/events.h"

namespace trainsup {
namespace {

// How long a new generation's world size and global batch wait for every
// rank to report its first step. A rank's first reports can trail the job's
// first step by seconds on a loaded host, and the batch summed before they
// arrive is a part of it (CI run 6 of 2026-12-07: 64 samples from one of two
// ranks where the batch was 128).
constexpr absl::Duration kFirstStepsWait = absl::Seconds(10);

}  // namespace

absl::Status RestartCoordinator::Transition(absl::Time now, JobEntry& job, JobState to,
                                            const std::string& reason) {
  JobLifecycle& life = job.mutable_lifecycle();
  const JobState from = life.state;
  if (!IsAllowedTransition(from, to)) {  // the table is the contract
    ++refused_transitions_;
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), ": ", JobStateName(from),
                                                      " -> ", JobStateName(to),
                                                      " is not an allowed transition"));
  }
  // Exposure for the MTBF: the time the job spends running.
  if (from == JobState::kRunning) job.mutable_costs().StopRunning(now);
  if (to == JobState::kRunning) job.mutable_costs().StartRunning(now);
  life.state = to;
  life.reason = reason;
  life.since = now;
  decisions_.Emit(&job, StateChangeEvent(now, EventJobOf(job), from, to, reason));
  JournalJob(now, job);
  return absl::OkStatus();
}

void RestartCoordinator::JournalJob(absl::Time now, JobEntry& job) {
  JobLifecycle& life = job.mutable_lifecycle();
  life.journaled_at = now;
  JobRow row;
  row.job = job.id();
  row.generation = job.job().generation();
  row.state = std::string(JobStateName(life.state));
  row.reason = life.reason;
  // A generation that has just started has no world size yet: keep the last.
  row.world_size = job.job().world_size() != 0 ? job.job().world_size() : life.last_world_size;
  row.changed = now;
  row.exposure_seconds = job.costs().ExposureSeconds(now);
  row.restarts_forgiven_before = life.governor.forgiven_before();
  row.restarts = life.restarts;
  row.failures = static_cast<uint64_t>(job.costs().failures());
  decisions_.journal().jobs.push_back(std::move(row));
  JobMeasuresRow measures;
  measures.job = job.id();
  measures.ledger = job.ledger().State();
  JobCosts::Samples samples = job.costs().samples();
  measures.checkpoint_costs = std::move(samples.checkpoint_blocking);
  measures.checkpoint_async = std::move(samples.checkpoint_async);
  measures.restart_costs = std::move(samples.restarts);
  decisions_.journal().measures.push_back(std::move(measures));
  // What it showed as it ended: nobody says it again after our restart.
  if (HasEnded(life.state)) JournalEndedJob(job, agents_, decisions_.journal());
}

void RestartCoordinator::BeginRestart(absl::Time now, JobEntry& job, absl::Time failed_at,
                                      const std::string& cause,
                                      const std::optional<HoldCause>& hold) {
  JobLifecycle& life = job.mutable_lifecycle();
  if (life.state != JobState::kRunning && life.state != JobState::kPending) return;
  if (!Transition(now, job, JobState::kStopping, cause).ok()) return;
  life.stop_deadline = now + options_.stop_timeout;
  life.hold_after_stop = hold;
  if (!hold) job.mutable_recovery().Begin(failed_at, now, cause);
}

bool RestartCoordinator::BeginKill(absl::Time now, JobEntry& job, const std::string& reason) {
  JobLifecycle& life = job.mutable_lifecycle();
  if (life.state != JobState::kRunning && life.state != JobState::kPending) return false;
  if (!Transition(now, job, JobState::kStopping, reason).ok()) return false;
  life.stop_deadline = now + options_.stop_timeout;
  life.hold_after_stop.reset();
  life.kill_after_stop = reason;
  return true;
}

void RestartCoordinator::SweepStopping(absl::Time now, JobEntry& job) {
  JobLifecycle& life = job.mutable_lifecycle();
  int waiting_for = 0;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    // An agent silent since before the stop (a frozen or lost host) cannot
    // stop: it is not waited for.
    const bool silent_since_stop =
        node.last_report < life.since && NodeLossDetector::IsSilent(node, now);
    if (node.connected && !node.stopped() && !silent_since_stop) ++waiting_for;
  }
  if (waiting_for > 0 && now < life.stop_deadline) return;
  job.mutable_recovery().MarkStopped(now);
  life.collect_stacks = false;
  const std::string stopped =
      waiting_for == 0 ? "every node stopped"
                       : absl::StrCat(Counted(waiting_for, "node", "nodes"), " did not stop within ",
                                      TenthsOfSeconds(options_.stop_timeout),
                                      "; going on without them");
  if (life.kill_after_stop) {
    const std::string reason = *std::move(life.kill_after_stop);
    life.kill_after_stop.reset();
    (void)Transition(now, job, JobState::kKilled, reason);
    job.mutable_recovery().Abandon();
    return;
  }
  if (life.hold_after_stop) {
    const HoldCause cause = *std::move(life.hold_after_stop);
    life.hold_after_stop.reset();
    Hold(now, job, cause);
    return;
  }
  const RestartGovernor::Decision decision = life.governor.Decide(now);
  if (!decision.allowed) {
    const RestartPolicy& policy = life.governor.policy();
    Hold(now, job, RestartLimitHold(decision.recent, policy.window, policy.limit, life.reason));
    return;
  }
  life.restart_at = now + decision.backoff;
  (void)Transition(now, job, JobState::kRestarting,
                   absl::StrCat(stopped, "; restart in ", TenthsOfSeconds(decision.backoff), " (",
                                decision.recent, " restarts within the window)"));
}

void RestartCoordinator::Hold(absl::Time now, JobEntry& job, const HoldCause& cause) {
  decisions_.Emit(&job, HoldEvent(now, EventJobOf(job), cause, ResumeAdviceText(job.fallback())));
  (void)Transition(now, job, JobState::kHeld, cause.reason);
  job.mutable_recovery().Abandon();
}

void RestartCoordinator::SweepRestarting(absl::Time now, JobEntry& job) {
  if (now >= job.lifecycle().restart_at) StartNextGeneration(now, job);
}

void RestartCoordinator::StartNextGeneration(absl::Time now, JobEntry& job) {
  JobLifecycle& life = job.mutable_lifecycle();
  // Members: every node heard lately (a stream that just broke counts: its
  // agent is reconnecting; a frozen or lost one does not), not quarantined.
  std::vector<NodeIndex> members;
  // The nodes left out, by why: the names that matter in the event.
  LeftOutNodes left_out;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (quarantine_.IsQuarantined(node.name)) {
      left_out.quarantined.push_back(node.name);
    } else if (node.preflight_failed) {
      left_out.failed_preflight.push_back(node.name);
    } else if (node.unreachable) {
      left_out.unreachable.push_back(node.name);
    } else if (!NodeLossDetector::RecentlyHeard(node, now)) {
      left_out.unheard.push_back(node.name);
    } else {
      members.push_back(i);
    }
  }
  LeaveOut(job, members, left_out);
  std::vector<std::string> runnable;
  for (NodeIndex i : members) runnable.push_back(agents_.node(i).name);
  std::sort(runnable.begin(), runnable.end());
  if (runnable.empty()) {
    (void)Transition(now, job, JobState::kFailed, "no connected, unquarantined node left to run on");
    job.mutable_recovery().Abandon();
    return;
  }
  Job& observed = job.job();
  const uint64_t from = observed.generation();
  const uint64_t to = from + 1;
  // Where it meets: decided before the generation starts, from whether the
  // last one met (a rank of it reported).
  std::vector<RendezvousMember> meeting;
  for (NodeIndex i : members) meeting.push_back({agents_.node(i).name, agents_.node(i).rendezvous});
  const RendezvousDecision* rendezvous = job.mutable_rendezvous().Decide(
      to, meeting, observed.first_heartbeat() != absl::InfinitePast());
  life.last_world_size = observed.world_size();
  life.last_global_batch = observed.global_batch();
  life.world_size_checked = false;
  life.governor.RecordRestart(now);
  ++life.restarts;
  const std::string cause = job.recovery().active() ? job.recovery().cause() : life.reason;
  decisions_.journal().restarts.push_back({now, job.id(), from, to, cause});
  job.mutable_recovery().MarkStarted(now);
  observed.ObserveGeneration(now, to);
  life.generation_adopted = false;  // this one the supervisor started itself
  job.SyncGeneration();
  for (NodeIndex i : members) agents_.mutable_node(i).member_generation = to;
  job.verdicts().left_out = left_out.elsewhere;
  decisions_.Emit(&job, RestartEvent(now, EventJobOf(job), runnable, std::move(left_out), cause));
  if (rendezvous != nullptr && !rendezvous->as_written) {
    decisions_.Emit(&job, RendezvousEvent(now, EventJobOf(job), *rendezvous));
  }
  (void)Transition(now, job, JobState::kRunning, absl::StrCat("generation ", to, " started"));
}

void RestartCoordinator::LeaveOut(JobEntry& job, std::vector<NodeIndex>& members,
                                  LeftOutNodes& left_out) const {
  JobLifecycle& life = job.mutable_lifecycle();
  const std::string name = std::exchange(life.leave_out_next, std::string());
  auto it = std::find_if(members.begin(), members.end(),
                         [&](NodeIndex i) { return agents_.node(i).name == name; });
  if (name.empty() || it == members.end()) return;  // not about to run anyway
  // The fewest nodes the job runs on, as its agents' commands say.
  uint32_t min_nodes = 0;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    min_nodes = std::max(min_nodes, agents_.node(i).min_nodes);
  }
  if (min_nodes == 0) {
    left_out.kept = absl::StrCat(name, " kept: the job's command does not say how few nodes it "
                                       "runs on (torchrun --nnodes MIN:MAX, or the agent's "
                                       "--min-nodes)");
  } else if (members.size() - 1 < min_nodes) {
    left_out.kept = absl::StrCat(name, " kept: the others are fewer than the job's minimum "
                                       "(its --nnodes)");
  } else {
    members.erase(it);
    left_out.elsewhere.push_back(name);
  }
}

void RestartCoordinator::TrackRecovery(absl::Time now, JobEntry& job) {
  JobLifecycle& life = job.mutable_lifecycle();
  const Job& observed = job.job();
  if (observed.first_progress() == absl::InfinitePast()) return;
  if (!life.world_size_checked &&
      (observed.ranks_stepped() >= observed.world_size() ||
       now - observed.first_progress() >= kFirstStepsWait)) {
    life.world_size_checked = true;
    if (life.last_world_size != 0 && life.last_world_size != observed.world_size()) {
      decisions_.Emit(&job, WorldSizeChangedEvent(now, EventJobOf(job), life.last_world_size,
                                                  observed.world_size(), life.last_global_batch,
                                                  observed.global_batch()));
    }
  }
  std::optional<RecoveryFigures> f =
      job.mutable_recovery().Complete(observed.first_heartbeat(), observed.first_progress());
  if (!f) return;
  decisions_.Emit(&job, RecoveredEvent(now, EventJobOf(job), *f));
  job.mutable_costs().AddRestart(absl::ToDoubleSeconds(f->total));
}

void RestartCoordinator::CheckFinished(absl::Time now, JobEntry& job) {
  const uint64_t generation = job.job().generation();
  const GenerationVerdicts& verdicts = job.verdicts();
  // A quarantined node, or one left out by a verdict, is not waited for.
  auto waived = [&](const std::string& name) {
    return quarantine_.IsQuarantined(name) ||
           std::find(verdicts.left_out.begin(), verdicts.left_out.end(), name) !=
               verdicts.left_out.end();
  };
  // A connected node of the job that has not run this generation yet is
  // still to come; one that left is not waited for.
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.connected && node.generation != generation && !waived(node.name)) return;
  }
  // The generation's end, from what its own nodes said for this job: their
  // records may serve another job by now.
  int participating = 0;
  for (const auto& [name, ran] : verdicts.nodes_ran) {
    if (waived(name)) continue;
    if (!ran.succeeded()) return;
    ++participating;
  }
  if (participating == 0) return;
  (void)Transition(now, job, JobState::kFinished,
                   participating == 1 ? std::string("the command exited 0 on its node")
                                      : absl::StrCat("the command exited 0 on all ", participating, " nodes"));
}

absl::StatusOr<std::string> RestartCoordinator::Resume(absl::Time now, JobEntry& job) {
  JobLifecycle& life = job.mutable_lifecycle();
  if (life.state == JobState::kFinished) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " has finished (", life.reason, "): nothing to resume"));
  }
  if (life.state != JobState::kHeld && life.state != JobState::kFailed &&
      life.state != JobState::kKilled) {
    return absl::StrCat("job ", job.id(), " is not held (it is ", JobStateName(life.state),
                        "); nothing to resume");
  }
  // Its next generation would start on no node, and the job fail at once.
  if (agents_.AgentsWaiting(job.id()) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " is ", JobStateName(life.state), " and no agent waits to run it (its "
        "agents have left): start them again (trainsup-agent run --job ", job.id(),
        " ...), then resume it"));
  }
  life.governor.Forgive(now);
  job.mutable_kill().Rearm();  // a kill criterion may fire again, on the new generation's steps
  decisions_.Emit(&job, ResumeEvent(now, EventJobOf(job), life.state, life.reason));
  life.restart_at = now;
  absl::Status moved = Transition(now, job, JobState::kRestarting, "resumed by an operator");
  if (!moved.ok()) return moved;
  return absl::StrCat("job ", job.id(), " resumed: generation ", job.job().generation() + 1,
                      " starts now");
}

}  // namespace trainsup
