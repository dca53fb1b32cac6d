#include "daemon/core/supervisor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "daemon/core/ended_job.h"
#include "daemon/core/events.h"
#include "daemon/core/state_restore.h"
#include "daemon/core/validation.h"

namespace trainsup {
Supervisor::Supervisor(SupervisorOptions options)
    : options_(std::move(options)),
      decisions_(options_.event_log_size),
      quarantine_(options_.quarantine),
      jobs_(options_),
      restarts_(options_, agents_, quarantine_, decisions_),
      admission_(options_, agents_, quarantine_, jobs_, restarts_),
      failures_(options_, agents_, quarantine_, jobs_, restarts_, decisions_),
      gpu_errors_(options_, agents_, quarantine_, jobs_, failures_, decisions_),
      detection_(options_, agents_, decisions_, failures_),
      signal_detection_(options_, agents_, decisions_, failures_, restarts_),
      planner_(options_, agents_, quarantine_, decisions_),
      reconciler_(options_.stop_grace, agents_, quarantine_, decisions_),
      cadence_(options_.cadence),
      views_(agents_, quarantine_, jobs_, planner_, failures_.verdicts(),
             detection_.early_failures()) {}

void Supervisor::UpdateCadence(absl::Time now, SessionId welcomed) {
  const std::optional<absl::Duration> changed = cadence_.Update(now, agents_.connected());
  if (!changed) return;
  for (NodeIndex i = 0; i < agents_.size(); ++i) {
    NodeRecord& node = agents_.mutable_node(i);
    if (!node.connected) continue;
    // The rules judge its silence by the interval it was told from now on.
    node.report_interval = *changed;
    if (node.session == welcomed) continue;
    AgentCommand command;
    command.session = node.session;
    command.node = node.name;
    command.kind = AgentCommand::Kind::kSettings;
    command.report_interval = *changed;
    decisions_.Command(std::move(command));
  }
}

absl::StatusOr<Supervisor::HelloResult> Supervisor::Hello(absl::Time now,
                                                          const AgentHelloInfo& hello) {
  if (absl::Status refused = admission_.Check(now, hello); !refused.ok()) return refused;
  const AgentRegistry::Connection connection = agents_.Connect(now, hello);
  UpdateCadence(now, connection.session);
  // The welcome tells it the interval in force (zero: its own stays).
  NodeRecord& node = agents_.mutable_node(connection.node);
  if (cadence_.enabled()) node.report_interval = cadence_.current();
  // Its health check failed: it does not join (observe-only: said, not acted on).
  node.preflight_failed =
      hello.preflight && !hello.preflight->passed && !options_.observe_only;
  const Admission::Admitted admitted = admission_.Admit(now, hello, connection.node);
  // Quarantined once its job exists (this may be the job's first hello):
  // the event is the job's.
  if (node.preflight_failed) {
    failures_.QuarantineNow(now, connection.node, PreflightReason(*hello.preflight), "preflight");
  }
  // An agent that comes back says how its command stands.
  admitted.job->NoteLauncher(node.name, hello.generation, node.launcher);
  HelloResult result;
  result.session = connection.session;
  result.superseded = connection.superseded;
  result.generation = admitted.job->job().generation();
  result.launch = admitted.launch;
  result.restarts = !options_.observe_only;
  result.report_interval = cadence_.current();
  result.rendezvous = admitted.rendezvous;
  if (admitted.launch) result.resume = admitted.job->fallback().advice();
  if (admitted.rendezvous_decided) {
    decisions_.Emit(admitted.job, RendezvousEvent(now, EventJobOf(admitted.job),
                                                  *admitted.job->rendezvous().current()));
  }
  detection_.NoticeHeard(now, admitted.job, connection.node);
  reconciler_.Reconcile(*admitted.job);  // e.g. the quarantine notice, or the hold
  return result;
}

void Supervisor::Disconnected(absl::Time now, SessionId session) {
  const NodeIndex index = agents_.Disconnect(session);
  if (index == kNoNode) return;
  UpdateCadence(now);
  if (JobEntry* job = jobs_.Find(agents_.node(index).job); job != nullptr) {
    job->job().ForgetLiveness(index);
    // The agent's last word after its job ended is what the node shows.
    if (HasEnded(job->lifecycle().state)) {
      JournalEndedNode(*job, agents_, index, decisions_.journal());
    }
  }
}

void Supervisor::CountAgentRejects(NodeRecord& node, const NodeReportInfo& report) {
  for (const auto& [reason, count] : report.rejected) {
    uint64_t& seen = node.agent_rejected[std::string(RejectReasonName(reason))];
    if (count > seen) {
      rejected_.Add(reason, count - seen);
      seen = count;
    }
  }
  if (report.dropped_total > node.agent_dropped) {
    agent_dropped_ += report.dropped_total - node.agent_dropped;
    node.agent_dropped = report.dropped_total;
  }
}

absl::Status Supervisor::Report(absl::Time now, SessionId session, const NodeReportInfo& report) {
  const NodeIndex index = agents_.NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  NodeRecord& node = agents_.mutable_node(index);
  JobEntry* found = jobs_.Find(node.job);
  if (found == nullptr) {  // forgotten while the stream stayed open: start over
    return absl::FailedPreconditionError(
        absl::StrCat("job ", node.job, " is no longer held by this supervisor; say hello again"));
  }
  JobEntry& job = *found;
  Job& observed = job.job();
  node.last_report = now;
  job.NoteHeard(now);
  if (report.generation > observed.generation() && !job.lifecycle().generation_adopted) {
    // A generation this supervisor never started: nothing in it is trusted.
    ++reports_refused_;
    rejected_.Add(RejectReason::kUnknownGeneration, report.heartbeats.size());
    return absl::OkStatus();
  }
  node.launcher = report.launcher;
  BoundLauncher(node.launcher);
  node.generation = report.generation;
  node.plans_held_through = report.plans_held_through;
  ++node.reports_received;
  ++reports_received_;
  CountAgentRejects(node, report);

  if (node.unreachable) detection_.NoticeHeard(now, &job, index);
  observed.ObserveGeneration(now, report.generation);
  for (const Heartbeat& hb : report.heartbeats) {
    std::optional<RejectReason> reason = CheckHeartbeat(hb, node.job, options_.limits.max_world_size);
    if (!reason && hb.generation > observed.generation() && !job.lifecycle().generation_adopted) {
      reason = RejectReason::kUnknownGeneration;
    }
    if (!reason) reason = observed.Apply(now, index, hb);
    if (reason) {
      rejected_.Add(*reason);
      continue;
    }
    job.ObserveApplied(now, hb, decisions_.journal());
    ++node.heartbeats_received;
    ++heartbeats_received_;
  }
  for (const RankProcessInfo& process : report.processes) {
    observed.ApplyProcess(now, index, process);
  }
  job.SyncGeneration();
  job.NoteLauncher(node.name, node.generation, node.launcher);
  // O(1) per report (a report must not cost O(ranks) or O(nodes)).
  Detection::NoticeReport(now, job,
                          node.generation == observed.generation() && node.launcher.failed());
  job.mutable_ledger().Advance(now, observed.generation(), observed.TakeFrontier());
  for (const auto& [blocking, async] : observed.TakeCheckpoints()) {
    job.mutable_costs().AddCheckpoint(blocking, async);
  }
  // A generation that begins to run shows its figures at once.
  if (admission_.NoticeReport(now, job)) detection_.UpdateFigures(now, job);
  return absl::OkStatus();
}

const NodeRecord* Supervisor::NodeOfSession(SessionId session) const {
  const NodeIndex index = agents_.NodeOfSession(session);
  return index == kNoNode ? nullptr : &agents_.node(index);
}

absl::Status Supervisor::GpuError(absl::Time now, SessionId session, const GpuErrorInfo& error) {
  const NodeIndex index = agents_.NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  if (error.xid == 0) return absl::InvalidArgumentError("a GPU error without an Xid");
  if (error.message.size() > kMaxGpuErrorMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a GPU error's message longer than ", kMaxGpuErrorMessageBytes, " bytes"));
  }
  if (error.ranks.size() > kMaxGpuErrorRanks || error.local_ranks.size() > kMaxGpuErrorRanks ||
      error.gpu_uuid.size() > 128 || error.pci_bus_id.size() > 32 || error.process.size() > 128) {
    return absl::InvalidArgumentError("a GPU error naming more than one GPU can hold");
  }
  gpu_errors_.OnGpuError(now, index, error);
  return absl::OkStatus();
}

absl::Status Supervisor::GpuHealth(absl::Time now, SessionId session,
                                   const GpuHealthInfo& report) {
  const NodeIndex index = agents_.NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  if (report.gpus.size() > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("a GPU health report of ", report.gpus.size(), " GPUs (at most ",
                     kMaxGpusPerNode, ")"));
  }
  const JobEntry* job = jobs_.Find(agents_.node(index).job);
  for (const GpuHealthSampleInfo& gpu : report.gpus) {
    if (gpu.ranks.size() > kMaxGpuErrorRanks || gpu.local_ranks.size() > kMaxGpuErrorRanks ||
        gpu.uuid.size() > 128 || gpu.pci_bus_id.size() > 32) {
      return absl::InvalidArgumentError("a GPU health report naming more than one GPU can hold");
    }
    for (uint32_t rank : gpu.ranks) {
      // Before the generation's ranks report, the world size is not known.
      if (job != nullptr && job->job().world_size() > 0 && rank >= job->job().world_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "GPU ", gpu.index, "'s rank ", rank, " outside world size ", job->job().world_size()));
      }
    }
  }
  gpu_errors_.OnGpuHealth(now, index, report);
  return absl::OkStatus();
}

namespace {

// Within what an agent may send of one rank's flight record.
bool FlightRecordFits(const FlightRecord& record) {
  if (record.groups.size() > kMaxFlightRecordGroupsReported) return false;
  for (const GroupRecord& g : record.groups) {
    if (g.last_collectives.size() > kMaxFlightRecordOpsReported ||
        g.last_p2p.size() > kMaxFlightRecordOpsReported || g.ranks.size() > (1u << 20)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status Supervisor::Stacks(absl::Time now, SessionId session, const StacksInfo& info) {
  const NodeIndex index = agents_.NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  const NodeRecord& node = agents_.node(index);
  JobEntry* job = jobs_.Find(node.job);
  if (job == nullptr || info.generation != job->job().generation()) {
    return absl::OkStatus();  // stacks of a generation the job has left: nothing to explain
  }
  for (const RankStackInfo& r : info.stacks) {
    if (r.rank >= job->job().world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("stack of rank ", r.rank, " outside world size ",
                                                     job->job().world_size()));
    }
    if (r.text.size() > kMaxStackBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("stack of rank ", r.rank, " longer than ", kMaxStackBytes, " bytes"));
    }
    if (r.flight_record && !FlightRecordFits(*r.flight_record)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flight record of rank ", r.rank, " with more than ", kMaxFlightRecordGroupsReported,
          " groups or ", kMaxFlightRecordOpsReported, " operations a group"));
    }
  }
  JobStacks& set = job->mutable_stacks().For(info.generation, now, job->verdicts().stall_event_id,
                                             job->verdicts().stall_culprit);
  set.collect_seconds = std::max(set.collect_seconds, info.collect_seconds);
  std::vector<uint32_t> ranks;
  int answered = 0;
  for (const RankStackInfo& r : info.stacks) {
    set.by_rank[r.rank] = {node.name, r.answered, r.text};
    if (r.flight_record) set.flight_records[r.rank] = *r.flight_record;
    if (!r.flight_record_error.empty()) {
      set.unread_dumps[r.rank] = ClipText(r.flight_record_error, kMaxFlightRecordErrorBytes);
    }
    ranks.push_back(r.rank);
    answered += r.answered ? 1 : 0;
    decisions_.journal().stacks.push_back({job->id(), set.generation, set.event_id, set.time,
                                           set.collect_seconds, set.culprit, r.rank, node.name,
                                           r.answered, r.text});
  }
  if (!set.flight_records.empty()) {
    set.collective = FindCollectiveCulprit(set.flight_records, job->job().world_size());
  }
  decisions_.Emit(job, StacksEvent(now, EventJobOf(job), node.name, static_cast<int>(ranks.size()),
                                   answered, info.collect_seconds));
  return absl::OkStatus();
}

std::vector<Event> Supervisor::Sweep(absl::Time now) {
  const size_t first = decisions_.pending_events().size();
  jobs_.ForEach([&](JobEntry& job) { SweepJob(now, job); });
  gpu_errors_.SweepDrains(now);
  ForgetIdle(now);
  UpdateCadence(now);  // a change the hysteresis held back at a hello
  const std::vector<Event>& events = decisions_.pending_events();
  return std::vector<Event>(events.begin() + first, events.end());
}

void Supervisor::SweepJob(absl::Time now, JobEntry& job) {
  switch (job.lifecycle().state) {
    case JobState::kPending:
    case JobState::kRunning: {
      // A dying job is one failure: a crash found here ends this sweep's
      // look at the job (its ranks are about to be stopped).
      if (detection_.SweepCrash(now, job)) break;
      // One pass over every rank's step window serves the stall rule, the
      // planner and the read model.
      const JobStepStats stats = job.StepStats();
      if (detection_.SweepStall(now, job, stats)) break;
      if (detection_.SweepStart(now, job)) break;
      if (signal_detection_.Sweep(now, job)) break;
      detection_.SweepNodes(now, job);
      detection_.SweepStragglers(now, job);
      restarts_.TrackRecovery(now, job);
      planner_.CheckAcks(now, job, stats);
      planner_.Replan(now, job, stats);
      restarts_.CheckFinished(now, job);
      // Keep the MTBF exposure on disk fresh, not only at transitions.
      if (now - job.lifecycle().journaled_at >= absl::Minutes(1)) restarts_.JournalJob(now, job);
      break;
    }
    case JobState::kStopping:
      restarts_.SweepStopping(now, job);
      break;
    case JobState::kRestarting:
      restarts_.SweepRestarting(now, job);
      break;
    case JobState::kHeld:
    case JobState::kKilled:
    case JobState::kFinished:
    case JobState::kFailed:
    case JobState::kCount:
      break;
  }
  reconciler_.Reconcile(job);
  detection_.UpdateFigures(now, job);
}

void Supervisor::ForgetIdle(absl::Time now) {
  const absl::Time cutoff = now - options_.limits.job_retention;
  std::vector<std::string> idle;
  jobs_.ForEach([&](const JobEntry& job) {
    if (job.last_heard() >= cutoff) return;
    for (NodeIndex i : agents_.NodesOf(job.id())) {
      if (agents_.node(i).connected) return;
    }
    idle.push_back(job.id());
  });
  for (const std::string& id : idle) jobs_.Erase(id);
  jobs_forgotten_ += idle.size();

  // A quarantined node stays: the quarantine outlives its agent.
  const std::vector<NodeIndex> moved = agents_.Forget(
      cutoff, [&](const NodeRecord& n) { return quarantine_.IsQuarantined(n.name); });
  if (moved.empty()) return;
  auto move = [&](NodeIndex& i) {
    if (i != kNoNode) i = i < moved.size() ? moved[i] : kNoNode;
  };
  jobs_.ForEach([&](JobEntry& job) {
    job.job().MoveNodes(move);
    job.mutable_signals().MoveNodes(move);
    if (job.mutable_lifecycle().last_failure) move(job.mutable_lifecycle().last_failure->node);
  });
  for (NodeIndex i : moved) nodes_forgotten_ += i == kNoNode ? 1 : 0;
}

absl::StatusOr<std::string> Supervisor::Resume(absl::Time now, absl::string_view job_id) {
  JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return restarts_.Resume(now, *job);
}

absl::StatusOr<std::string> Supervisor::Quarantine(absl::Time now, absl::string_view node,
                                                   absl::string_view reason, bool force) {
  return failures_.Quarantine(now, node, reason, force);
}

absl::StatusOr<std::string> Supervisor::Unquarantine(absl::Time now, absl::string_view node) {
  return failures_.Unquarantine(now, node);
}

absl::StatusOr<std::string> Supervisor::RequestCheckpoint(absl::Time now,
                                                          absl::string_view job_id) {
  JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return planner_.RequestCheckpoint(now, *job);
}

absl::StatusOr<std::string> Supervisor::SetKillCriteria(
    absl::Time now, absl::string_view job_id, const std::optional<KillCriteriaSpec>& spec) {
  JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  if (spec) {
    if (absl::Status s = CheckKillCriteria(*spec); !s.ok()) return s;
  }
  const bool had = job->kill().operator_spec().has_value();
  if (!spec && !had) return absl::StrCat("job ", job->id(), " has no operator kill criteria");
  if (spec && had && *job->kill().operator_spec() == *spec) {
    return absl::StrCat("job ", job->id(), ": these kill criteria are already set");
  }
  job->mutable_kill().SetOperator(spec);
  decisions_.journal().kill_criteria.push_back({job->id(), "operator", spec, now});
  if (spec) return absl::StrCat("job ", job->id(), ": kill criteria set");
  return absl::StrCat("job ", job->id(), ": operator kill criteria cleared",
                      job->kill().script() ? "; the script's are in force" : "");
}

absl::StatusOr<std::vector<KillCriteriaView>> Supervisor::KillCriteriaOf(
    absl::string_view job_id) const {
  std::vector<KillCriteriaView> out;
  auto add = [&](const JobEntry& job) {
    std::optional<KillCriteriaView> view =
        trainsup::ViewOf(job.id(), JobStateName(job.lifecycle().state), job.kill());
    if (view) out.push_back(*std::move(view));
  };
  if (job_id.empty()) {
    for (const JobEntry* job : jobs_.Sorted()) add(*job);
    return out;
  }
  const JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  add(*job);
  return out;
}

void Supervisor::FenceDone(absl::Time now, const FenceRequest& request, bool ok,
                           const std::string& detail) {
  const std::string& node = request.node;
  const NodeIndex index = agents_.Find(node);
  JobEntry* job = index == kNoNode ? nullptr : jobs_.Find(agents_.node(index).job);
  decisions_.Emit(job, FenceEvent(now, EventJobOf(job), request.action, node, ok, detail));
  // A failed one stays pending: it is tried again when the supervisor
  // restarts (or an operator fences or resumes the node by hand).
  if (ok) decisions_.FenceSucceeded(now, request);
}

void Supervisor::PersistFailed(absl::Time now, const std::string& node, const std::string& what) {
  const NodeIndex index = node.empty() ? kNoNode : agents_.Find(node);
  JobEntry* job = index == kNoNode ? nullptr : jobs_.Find(agents_.node(index).job);
  decisions_.Emit(job, PersistFailedEvent(now, EventJobOf(job), node, what));
}

void Supervisor::LeadershipChanged(absl::Time now, absl::string_view role, int64_t epoch,
                                   const std::string& reason) {
  decisions_.Emit(nullptr, LeadershipEvent(now, role, epoch, reason));
}

void Supervisor::Restore(absl::Time now, const PersistedState& state) {
  RestoreState(now, state, options_, agents_, quarantine_, jobs_, decisions_);
  // The read model shows what the sweep measured; a job read back must show
  // it before the first sweep, as it did before the restart.
  jobs_.ForEach([&](JobEntry& job) { detection_.UpdateFigures(now, job); });
}

const Job* Supervisor::FindJob(absl::string_view job_id) const {
  const JobEntry* entry = jobs_.Find(job_id);
  return entry == nullptr ? nullptr : &entry->job();
}

std::optional<JobView> Supervisor::ViewOf(absl::string_view job_id, absl::Time now) const {
  const JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return std::nullopt;
  return views_.JobViewOf(*job, now);
}

bool Supervisor::RankViewsOf(absl::string_view job_id, std::vector<RankView>* rows,
                             std::vector<RankTexts>* texts) const {
  const JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return false;
  views_.RankViewsOf(*job, rows, texts);
  return true;
}

absl::StatusOr<std::optional<StacksView>> Supervisor::StacksOf(absl::string_view job_id,
                                                               uint64_t generation) const {
  const JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  return views_.StacksOf(*job, generation);
}

absl::StatusOr<Diagnosis> Supervisor::Diagnose(absl::string_view job_id, absl::Time now) const {
  const JobEntry* job = jobs_.Find(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", job_id, "'"));
  const JobView view = views_.JobViewOf(*job, now);
  std::vector<RankView> ranks;
  std::vector<RankTexts> texts;
  views_.RankViewsOf(*job, &ranks, &texts);
  const std::vector<NodeView> nodes = views_.NodeViews();
  const std::optional<StacksView> stacks = views_.StacksOf(*job, 0);
  const std::vector<Event> events = decisions_.events().Since(0, job_id);
  DiagnoseInput input;
  input.job = &view;
  input.ranks = &ranks;
  input.nodes = &nodes;
  input.stacks = stacks ? &*stacks : nullptr;
  input.events = &events;
  return trainsup::Diagnose(input, now, options_.diagnose);
}

}  // namespace trainsup
