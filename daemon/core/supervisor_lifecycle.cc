// The Supervisor's lifecycle decisions: coordinated restarts, the restart cap,
// quarantine, and putting back what the state store kept. The detectors that
// feed them are in supervisor.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/core/supervisor.h"
#include "daemon/core/format.h"
#include "daemon/core/job_stats.h"

namespace trainsup {
namespace {

bool IsStopped(const LauncherInfo& launcher) {
  return launcher.state == LauncherState::kExited || launcher.state == LauncherState::kWaiting;
}

bool IsRunning(const LauncherInfo& launcher) {
  return launcher.state == LauncherState::kRunning || launcher.state == LauncherState::kStopping;
}

}  // namespace

void Supervisor::JournalJob(absl::Time now, const Job& job) {
  JobControl& control = ControlFor(job);
  control.journaled_at = now;
  // A generation that has just started has no world size yet: keep the last.
  const uint32_t world_size = job.world_size() != 0 ? job.world_size() : control.last_world_size;
  output_.journal.jobs.push_back({job.id(), job.generation(), std::string(JobStateName(control.state)),
                                  control.reason, world_size, now, control.ExposureSeconds(now)});
}

void Supervisor::Transition(absl::Time now, Job& job, JobState to, const std::string& reason) {
  JobControl& control = ControlFor(job);
  const JobState from = control.state;
  if (!IsAllowedTransition(from, to)) return;  // the table is the contract
  // Exposure for the MTBF: the time the job spends running.
  if (from == JobState::kRunning) {
    control.exposure_seconds = control.ExposureSeconds(now);
    control.running_since = absl::InfinitePast();
  }
  if (to == JobState::kRunning) control.running_since = now;
  control.state = to;
  control.reason = reason;
  control.since = now;
  Event e;
  e.time = now;
  e.kind = EventKind::kStateChange;
  e.message = absl::StrCat(JobStateName(from), " -> ", JobStateName(to), ": ", reason);
  Emit(&job, std::move(e));
  JournalJob(now, job);
}

void Supervisor::Command(const NodeRecord& node, AgentCommand::Kind kind, uint64_t generation,
                         const std::string& reason) {
  AgentCommand c;
  c.session = node.session;
  c.node = node.name;
  c.kind = kind;
  c.generation = generation;
  c.reason = reason;
  c.grace = options_.stop_grace;
  output_.commands.push_back(std::move(c));
}

// Desired state against what each agent of the job reports; every decision
// goes to a stream once (NodeRecord::told is reset for each new stream).
void Supervisor::Reconcile(Job& job) {
  const JobControl& control = ControlFor(job);
  const uint64_t generation = job.generation();
  for (NodeRecord& node : nodes_) {
    if (node.job != job.id() || !node.connected) continue;
    // The plans go to every agent, in order, so that its ranks hold what
    // every other rank holds.
    for (const CheckpointPlanSpec& plan : control.plans) {
      if (plan.plan_id <= node.told.plan_id || node.quarantined) continue;
      AgentCommand c;
      c.session = node.session;
      c.node = node.name;
      c.kind = AgentCommand::Kind::kPlan;
      c.plan = plan;
      output_.commands.push_back(std::move(c));
      node.told.plan_id = plan.plan_id;
    }
    if (node.quarantined) {
      if (!node.told.quarantine) {
        Command(node, AgentCommand::Kind::kQuarantine, generation, node.quarantine_reason);
        node.told.quarantine = true;
      }
      continue;
    }
    switch (control.state) {
      case JobState::kStopping:
        if (IsRunning(node.launcher) && node.told.stop_generation != generation + 1) {
          Command(node, AgentCommand::Kind::kStop, node.generation, control.reason);
          node.told.stop_generation = generation + 1;
        }
        break;
      case JobState::kPending:
      case JobState::kRunning:
        if (IsStopped(node.launcher) && node.generation < generation &&
            node.told.start_generation != generation) {
          Command(node, AgentCommand::Kind::kStart, generation, control.reason);
          node.told.start_generation = generation;
          node.told.hold = false;
        } else if (IsRunning(node.launcher) && node.generation < generation &&
                   node.told.stop_generation != node.generation + 1) {
          // It missed a restart (it was away): stop it, then it gets a start.
          Command(node, AgentCommand::Kind::kStop, node.generation,
                  absl::StrCat("generation ", node.generation, " is stale; the job runs ",
                               generation));
          node.told.stop_generation = node.generation + 1;
        }
        break;
      case JobState::kHeld:
        if (!node.told.hold) {
          Command(node, AgentCommand::Kind::kHold, generation, control.reason);
          node.told.hold = true;
        }
        break;
      case JobState::kRestarting:
      case JobState::kFinished:
      case JobState::kFailed:
      case JobState::kCount:
        break;
    }
  }
}

void Supervisor::SweepLifecycle(absl::Time now, Job& job) {
  JobControl& control = ControlFor(job);
  switch (control.state) {
    case JobState::kPending:
    case JobState::kRunning: {
      // A dying job is one failure: a crash found here ends this sweep's
      // look at the job (its ranks are about to be stopped).
      if (SweepCrash(now, job)) break;
      // One pass over every rank's step window serves the stall rule and the
      // planner.
      const JobStepStats stats = ComputeJobStepStats(job);
      if (SweepStall(now, job, stats)) break;
      SweepStragglers(now, job);
      TrackRecovery(now, job);
      Replan(now, job, stats);
      CheckFinished(now, job);
      // Keep the MTBF exposure on disk fresh, not only at transitions.
      if (now - ControlFor(job).journaled_at >= absl::Minutes(1)) JournalJob(now, job);
      break;
    }
    case JobState::kStopping:
      SweepStopping(now, job);
      break;
    case JobState::kRestarting:
      if (now >= control.restart_at) StartNextGeneration(now, job);
      break;
    case JobState::kHeld:
    case JobState::kFinished:
    case JobState::kFailed:
    case JobState::kCount:
      break;
  }
  Reconcile(job);
}

void Supervisor::OnFailure(absl::Time now, Job& job, absl::string_view kind, NodeIndex node,
                           std::optional<uint32_t> rank, absl::Time failed_at,
                           const std::string& message) {
  const std::string node_name = node == kNoNode ? "" : nodes_[node].name;
  ++ControlFor(job).failures;
  output_.journal.failures.push_back(
      {failed_at, job.id(), job.generation(), std::string(kind), node_name, rank, message});
  if (options_.observe_only) return;  // recorded and reported, nothing done
  // Restart first, so that the restart is about this failure even when the
  // attribution below quarantines the node (which would restart it too).
  BeginRestart(now, job, failed_at,
               absl::StrCat(kind, node_name.empty() ? "" : absl::StrCat(" on ", node_name), ": ",
                            message));
  if (node != kNoNode) AttributeToNode(now, node, kind, message);
}

void Supervisor::AttributeToNode(absl::Time now, NodeIndex index, absl::string_view kind,
                                 const std::string& what) {
  if (options_.observe_only) return;
  NodeRecord& node = nodes_[index];
  QuarantinePolicy::Verdict verdict = quarantine_.Attribute(now, node.name, what, nodes_.size());
  if (verdict.skipped_by_cap) {
    Event e;
    e.time = now;
    e.kind = EventKind::kQuarantineSkipped;
    e.job = node.job;
    e.node = node.name;
    e.message = absl::StrCat("node ", node.name, " qualifies for quarantine (", verdict.reason,
                             ") but ", quarantine_.quarantined_count(),
                             " nodes are quarantined already, the most --quarantine-max-fraction ",
                             quarantine_.options().max_fraction, " of ", nodes_.size(), " allows");
    e.figures = {{"failures", verdict.failures}};
    Emit(nullptr, std::move(e));
  }
  if (verdict.quarantine) QuarantineNode(now, index, verdict.reason, "policy");
}

void Supervisor::QuarantineNode(absl::Time now, NodeIndex index, const std::string& reason,
                                absl::string_view by) {
  NodeRecord& node = nodes_[index];
  quarantine_.Quarantine(node.name, reason);
  node.quarantined = true;
  node.quarantine_reason = reason;
  output_.journal.nodes.push_back({node.name, true, reason, now, std::string(by)});
  output_.fences.push_back({node.name, reason});
  Event e;
  e.time = now;
  e.kind = EventKind::kQuarantine;
  e.job = node.job;
  e.node = node.name;
  e.message = absl::StrCat("node ", node.name, " quarantined by ", by, ": ", reason);
  Emit(nullptr, std::move(e));
  // Its job goes on without it: restart everywhere else.
  auto it = jobs_.find(node.job);
  if (it != jobs_.end()) {
    BeginRestart(now, *it->second, now, absl::StrCat("node ", node.name, " quarantined"));
  }
}

void Supervisor::BeginRestart(absl::Time now, Job& job, absl::Time failed_at,
                              const std::string& cause) {
  JobControl& control = ControlFor(job);
  if (control.state != JobState::kRunning && control.state != JobState::kPending) return;
  Transition(now, job, JobState::kStopping, cause);
  control.stop_deadline = now + options_.stop_timeout;
  control.recovery = JobControl::Recovery{failed_at, now, absl::InfinitePast(),
                                          absl::InfinitePast(), cause};
}

void Supervisor::SweepStopping(absl::Time now, Job& job) {
  JobControl& control = ControlFor(job);
  int waiting_for = 0;
  for (const NodeRecord& node : nodes_) {
    if (node.job == job.id() && node.connected && !IsStopped(node.launcher)) ++waiting_for;
  }
  if (waiting_for > 0 && now < control.stop_deadline) return;
  if (control.recovery) control.recovery->stopped = now;
  const std::string stopped =
      waiting_for == 0 ? "every node stopped"
                       : absl::StrCat(waiting_for, " node(s) did not stop within ",
                                      TenthsOfSeconds(options_.stop_timeout), "; going on without them");
  RestartGovernor::Decision decision = control.governor.Decide(now);
  if (!decision.allowed) {
    const std::string reason = absl::StrCat(
        "restart limit reached: ", decision.recent, " restarts within ",
        absl::FormatDuration(control.governor.policy().window), " (--restart-limit ",
        control.governor.policy().limit, "); last failure: ", control.reason);
    Event e;
    e.time = now;
    e.kind = EventKind::kHold;
    e.message = absl::StrCat(reason, ". `trainsupctl resume ", job.id(), "` lifts it");
    e.figures = {{"restarts_in_window", decision.recent}};
    Emit(&job, std::move(e));
    Transition(now, job, JobState::kHeld, reason);
    control.recovery.reset();
    return;
  }
  control.restart_at = now + decision.backoff;
  Transition(now, job, JobState::kRestarting,
             absl::StrCat(stopped, "; restart in ", TenthsOfSeconds(decision.backoff), " (",
                          decision.recent, " restarts within the window)"));
}

void Supervisor::StartNextGeneration(absl::Time now, Job& job) {
  JobControl& control = ControlFor(job);
  std::vector<std::string> runnable;
  for (const NodeRecord& node : nodes_) {
    if (node.job == job.id() && node.connected && !node.quarantined) runnable.push_back(node.name);
  }
  std::sort(runnable.begin(), runnable.end());
  if (runnable.empty()) {
    Transition(now, job, JobState::kFailed, "no connected, unquarantined node left to run on");
    control.recovery.reset();
    return;
  }
  const uint64_t from = job.generation();
  const uint64_t to = from + 1;
  control.last_world_size = job.world_size();
  control.last_global_batch = job.global_batch();
  control.world_size_checked = false;
  control.governor.RecordRestart(now);
  ++control.restarts;
  const std::string cause = control.recovery ? control.recovery->cause : control.reason;
  output_.journal.restarts.push_back({now, job.id(), from, to, cause});
  if (control.recovery) control.recovery->started = now;
  job.ObserveGeneration(now, to);
  Event e;
  e.time = now;
  e.kind = EventKind::kRestart;
  e.message = absl::StrCat("generation ", to, " started on ", absl::StrJoin(runnable, ", "),
                           " after: ", cause);
  e.figures = {{"nodes", static_cast<double>(runnable.size())}};
  Emit(&job, std::move(e));
  Transition(now, job, JobState::kRunning, absl::StrCat("generation ", to, " started"));
}

void Supervisor::TrackRecovery(absl::Time now, Job& job) {
  JobControl& control = ControlFor(job);
  if (job.first_progress() == absl::InfinitePast()) return;
  if (!control.world_size_checked) {
    control.world_size_checked = true;
    if (control.last_world_size != 0 && control.last_world_size != job.world_size()) {
      Event e;
      e.time = now;
      e.kind = EventKind::kWorldSizeChanged;
      const uint64_t old_batch = control.last_global_batch;
      const uint64_t new_batch = job.global_batch();
      e.message = absl::StrCat("world size ", control.last_world_size, " -> ", job.world_size());
      if (old_batch > 0 && new_batch > 0) {
        absl::StrAppend(&e.message,
                        absl::StrFormat(": global batch %d -> %d samples (x%.2f); the learning "
                                        "rate the config names was tuned for the old batch",
                                        old_batch, new_batch,
                                        static_cast<double>(new_batch) / old_batch));
      } else {
        absl::StrAppend(&e.message, ": the global batch changes with it unless the script "
                                    "rescales (report samples= in hb.step to see by how much)");
      }
      e.figures = {{"old_world_size", control.last_world_size},
                   {"new_world_size", job.world_size()},
                   {"old_global_batch", static_cast<double>(old_batch)},
                   {"new_global_batch", static_cast<double>(new_batch)}};
      Emit(&job, std::move(e));
    }
  }
  if (!control.recovery || control.recovery->started == absl::InfinitePast()) return;
  const JobControl::Recovery& r = *control.recovery;
  const absl::Time up = std::max(job.first_heartbeat(), r.started);
  Event e;
  e.time = now;
  e.kind = EventKind::kRecovered;
  const absl::Duration total = job.first_progress() - r.failed;
  e.message = absl::StrCat("first step of generation ", job.generation(), " ", TenthsOfSeconds(total),
                           " after the failure: detect ", TenthsOfSeconds(r.detected - r.failed), ", stop ",
                           TenthsOfSeconds(r.stopped - r.detected), ", backoff ", TenthsOfSeconds(r.started - r.stopped),
                           ", relaunch ", TenthsOfSeconds(up - r.started), ", first step ",
                           TenthsOfSeconds(job.first_progress() - up));
  e.figures = {{"detect_seconds", absl::ToDoubleSeconds(r.detected - r.failed)},
               {"stop_seconds", absl::ToDoubleSeconds(r.stopped - r.detected)},
               {"backoff_seconds", absl::ToDoubleSeconds(r.started - r.stopped)},
               {"relaunch_seconds", absl::ToDoubleSeconds(up - r.started)},
               {"first_step_seconds", absl::ToDoubleSeconds(job.first_progress() - up)},
               {"total_seconds", absl::ToDoubleSeconds(total)}};
  Emit(&job, std::move(e));
  control.restart_costs.Add(absl::ToDoubleSeconds(total));
  control.recovery.reset();
}

void Supervisor::CheckFinished(absl::Time now, Job& job) {
  int participating = 0;
  for (const NodeRecord& node : nodes_) {
    if (node.job != job.id() || node.quarantined) continue;
    if (node.generation != job.generation()) {
      // A connected node that has not run this generation yet is still to
      // come; one that left is not waited for.
      if (node.connected) return;
      continue;
    }
    if (!node.launcher.succeeded()) return;
    ++participating;
  }
  if (participating == 0) return;
  Transition(now, job, JobState::kFinished,
             absl::StrCat("the command exited 0 on all ", participating, " node(s)"));
}

absl::StatusOr<std::string> Supervisor::Resume(absl::Time now, absl::string_view job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  Job& job = *it->second;
  JobControl& control = ControlFor(job);
  if (control.state != JobState::kHeld && control.state != JobState::kFailed) {
    return absl::StrCat("job ", job_id, " is not held (it is ", JobStateName(control.state),
                        "); nothing to resume");
  }
  control.governor.Forgive(now);
  Event e;
  e.time = now;
  e.kind = EventKind::kResume;
  e.message = absl::StrCat("resumed by an operator from ", JobStateName(control.state), " (",
                           control.reason, ")");
  Emit(&job, std::move(e));
  control.restart_at = now;
  Transition(now, job, JobState::kRestarting, "resumed by an operator");
  return absl::StrCat("job ", job_id, " resumed: generation ", job.generation() + 1,
                      " starts now");
}

absl::StatusOr<std::string> Supervisor::Quarantine(absl::Time now, absl::string_view node,
                                                   absl::string_view reason) {
  auto it = node_index_.find(node);
  if (it == node_index_.end()) return absl::NotFoundError(absl::StrCat("no node '", node, "'"));
  if (nodes_[it->second].quarantined) {
    return absl::StrCat("node ", node, " already quarantined: ",
                        nodes_[it->second].quarantine_reason);
  }
  QuarantineNode(now, it->second, std::string(reason), "operator");
  return absl::StrCat("node ", node, " quarantined");
}

absl::StatusOr<std::string> Supervisor::Unquarantine(absl::Time now, absl::string_view name) {
  auto it = node_index_.find(name);
  if (it == node_index_.end()) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  NodeRecord& node = nodes_[it->second];
  if (!node.quarantined) return absl::StrCat("node ", name, " already not quarantined");
  quarantine_.Unquarantine(node.name);
  node.quarantined = false;
  node.quarantine_reason.clear();
  output_.journal.nodes.push_back({node.name, false, "lifted by an operator", now, "operator"});
  Event e;
  e.time = now;
  e.kind = EventKind::kUnquarantine;
  e.job = node.job;
  e.node = node.name;
  e.message = absl::StrCat("node ", node.name, " unquarantined by an operator");
  Emit(nullptr, std::move(e));
  return absl::StrCat("node ", name, " unquarantined");
}

void Supervisor::FenceDone(absl::Time now, const std::string& node, bool ok,
                           const std::string& detail) {
  Event e;
  e.time = now;
  e.kind = EventKind::kFence;
  auto it = node_index_.find(node);
  if (it != node_index_.end()) e.job = nodes_[it->second].job;
  e.node = node;
  e.message = absl::StrCat("fence command for ", node, ok ? " succeeded" : " FAILED", ": ", detail);
  e.figures = {{"ok", ok ? 1 : 0}};
  Emit(nullptr, std::move(e));
}

void Supervisor::Restore(absl::Time now, const PersistedState& state) {
  // When an operator last lifted each node's quarantine: failures before it
  // no longer count (as at run time, where Unquarantine forgets them).
  absl::flat_hash_map<std::string, absl::Time> released;
  for (const NodeRecordRow& row : state.nodes) {
    NodeRecord& node = nodes_[NodeFor(row.name)];
    node.quarantined = row.quarantined;
    node.quarantine_reason = row.quarantined ? row.reason : "";
    if (row.quarantined) quarantine_.Quarantine(row.name, row.reason);
    if (!row.quarantined) released[row.name] = row.changed;
  }
  for (const JobRow& row : state.jobs) {
    Job& job = JobFor(row.job);
    job.ObserveGeneration(now, row.generation);
    JobControl& control = ControlFor(job);
    control.state = JobStateFromName(row.state).value_or(JobState::kPending);
    control.reason = row.reason;
    control.since = row.changed;
    control.last_world_size = row.world_size;
    control.exposure_seconds = row.exposure_seconds;
    // The time between the last record and now (when this supervisor was
    // down) is not counted: nobody watched it.
    if (control.state == JobState::kRunning) control.running_since = now;
    // A restart that was under way goes on from where it was.
    control.stop_deadline = now + options_.stop_timeout;
    control.restart_at = now;
  }
  for (const FailureRow& row : state.failures) {
    // Crashes and stalls count towards the job's MTBF.
    if (row.kind == "crash" || row.kind == "stall") {
      auto it = jobs_.find(row.job);
      if (it != jobs_.end()) ++ControlFor(*it->second).failures;
    }
    // Failures inside the window still count towards a quarantine.
    auto lifted = released.find(row.node);
    if (!row.node.empty() && row.time > now - quarantine_.options().window &&
        !quarantine_.IsQuarantined(row.node) &&
        (lifted == released.end() || row.time > lifted->second)) {
      quarantine_.Remember(row.time, row.node, row.message);
    }
  }
  for (const RestartRow& row : state.restarts) {
    auto it = jobs_.find(row.job);
    if (it != jobs_.end()) ControlFor(*it->second).governor.RecordRestart(row.time);
  }
  events_.Restore(state.events);
  for (const Event& e : state.events) {
    if (e.kind != EventKind::kResume) continue;
    auto it = jobs_.find(e.job);
    if (it != jobs_.end()) ControlFor(*it->second).governor.Forgive(e.time);
  }
}

}  // namespace trainsup
