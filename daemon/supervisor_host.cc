#include "daemon/supervisor_host.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format.h"
#include "common/log.h"
#include "common/provenance.h"
#include "common/random_id.h"
#include "daemon/fence_runner.h"
#include "daemon/proto_convert.h"
#include "daemon/state_store.h"

namespace trainsup {
namespace {

// A command's kind in a word, for the persist_failed event.
const char* CommandName(AgentCommand::Kind kind) {
  switch (kind) {
    case AgentCommand::Kind::kStop: return "stop";
    case AgentCommand::Kind::kStart: return "start";
    case AgentCommand::Kind::kHold: return "hold";
    case AgentCommand::Kind::kQuarantine: return "quarantine";
    case AgentCommand::Kind::kPlan: return "plan";
    case AgentCommand::Kind::kSettings: return "settings";
  }
  return "command";
}

// How many records of each kind come back from the store at start-up (and
// StateStore::kEventsRestored events).
constexpr size_t kRestoreFailures = 100000;
constexpr size_t kRestoreRestarts = 100000;

// What came back, counted as the operator sees it: the nodes and jobs held
// now, the failures the MTBF counts beside the failure records read.
void LogRestored(const PersistedState& state, const Supervisor& core) {
  size_t quarantined = 0;
  for (const NodeRecordRow& n : state.nodes) quarantined += n.quarantined ? 1 : 0;
  size_t ended = 0;
  uint64_t job_killing = 0;
  for (const JobRow& job : state.jobs) {
    ended += job.state == "finished" || job.state == "failed" ? 1 : 0;
    job_killing += job.failures;
  }
  TRAINSUP_LOG_INFO(
      "state restored: %d jobs (%d ended), %d nodes (%d quarantined), %d failure records of "
      "every kind (%d job-killing failures, what the MTBF counts), %d restart records, %d events",
      state.jobs.size(), ended, core.nodes().size(), quarantined, state.failures.size(),
      job_killing, state.restarts.size(), state.events.size());
}

}  // namespace

SupervisorHost::SupervisorHost(SupervisorOptions options, const Clock* clock, StateStore* store,
                               JournalSink* sink)
    : clock_(clock),
      store_(store),
      incarnation_(RandomId()),
      options_(options),
      core_(std::make_unique<Supervisor>(options)) {
  if (sink == nullptr) sink = store;
  const bool committed_only = sink != nullptr;
  publisher_ = std::make_unique<SnapshotPublisher>(
      [this, committed_only](uint64_t after_id) {
        absl::ReaderMutexLock lock(&mu_);
        std::vector<Event> events = core_->events().Since(after_id);
        if (committed_only) {
          const uint64_t shown = events_shown_through_.load();
          events.erase(std::find_if(events.begin(), events.end(),
                                    [shown](const Event& e) { return e.id > shown; }),
                       events.end());
        }
        return SnapshotPublisher::Capture{CaptureSnapshot(*core_, clock_->Now()),
                                          std::move(events)};
      },
      options.event_log_size);
  if (sink != nullptr) writer_ = std::make_unique<JournalWriter>(sink);
}

void SupervisorHost::set_fence_runner(FenceRunner* fence) {
  absl::MutexLock lock(&fence_mu_);
  fence_ = fence;
}

void SupervisorHost::FlushWrites() {
  if (writer_ != nullptr) writer_->Flush();
}

absl::Status SupervisorHost::Restore() {
  if (store_ == nullptr) return absl::OkStatus();
  FlushWrites();  // everything the core decided is in the store
  absl::StatusOr<PersistedState> state =
      store_->Load(StateStore::kEventsRestored, kRestoreFailures, kRestoreRestarts);
  if (!state.ok()) return state.status();
  {
    absl::MutexLock lock(&mu_);
    // The agents' sessions were with the core replaced: each agent says hello
    // again (its stream was ended while this instance did not act).
    channels_.clear();
    const SessionId last_session = core_->last_session();
    core_ = std::make_unique<Supervisor>(options_);
    core_->StartSessionsAfter(last_session);
    core_->Restore(clock_->Now(), *state);
    ShowEventsThrough(core_->events().last_id());  // every one read is committed
    ActLocked();  // the fences still pending run again
    LogRestored(*state, *core_);
  }
  // The history restored is there for the first reader (the first call a
  // new leader answers).
  publisher_->PublishNow();
  return absl::OkStatus();
}

void SupervisorHost::ShowEventsThrough(uint64_t id) {
  uint64_t shown = events_shown_through_.load();
  while (id > shown) {
    if (events_shown_through_.compare_exchange_weak(shown, id)) {
      publisher_->Changed();  // republished with them
      return;
    }
  }
}

void SupervisorHost::ActLocked(bool reporting) {
  publisher_->Changed();
  SupervisorOutput output = core_->TakeOutput();
  for (const Event& e : output.events) {
    TRAINSUP_LOG_INFO("event %d %s job=%s generation=%d%s: %s", e.id, EventKindName(e.kind), e.job,
                      e.generation, e.node.empty() ? "" : " node=" + e.node, e.message);
  }
  // The channels are looked up now, as decided; the sends happen after the
  // commit, in the writer's order, so each agent gets its commands in the
  // order decided (sends only queue on the stream: they never block).
  Effects effects;
  for (const AgentCommand& c : output.commands) {
    auto it = channels_.find(c.session);
    if (it != channels_.end()) {
      v1::SupervisorMessage message = ToProto(c);
      message.set_epoch(static_cast<uint64_t>(epoch_.load()));
      effects.sends.push_back(
          {it->second, std::move(message), absl::StrCat(CommandName(c.kind), " ", c.node)});
    }
  }
  effects.fences = std::move(output.fences);
  const uint64_t last_event = output.events.empty() ? 0 : output.events.back().id;
  if (writer_ == nullptr) {
    Perform(effects);
    return;
  }
  if (output.journal.empty() && effects.empty()) return;
  // A quarantine is fsynced before its fence tells the scheduler: after a
  // power loss the records are ahead of the cluster, never behind it.
  const JournalSink::Sync sync =
      effects.fences.empty() ? JournalSink::Sync::kNormal : JournalSink::Sync::kFull;
  writer_->Write(std::move(output.journal), sync,
                 [this, effects = std::move(effects), reporting,
                  last_event](const absl::Status& committed) {
                   if (!absl::IsAborted(committed)) ShowEventsThrough(last_event);
                   if (committed.ok()) {
                     Perform(effects);
                   } else {
                     NotActedOn(effects, committed, reporting);
                   }
                 });
}

void SupervisorHost::Perform(const Effects& effects) {
  for (const Send& send : effects.sends) send.channel->Send(send.message);
  if (effects.fences.empty()) return;
  absl::MutexLock lock(&fence_mu_);
  for (const FenceRequest& f : effects.fences) {
    // Without a command for it, it stays pending in the store (run at a
    // later start that has one).
    if (fence_ == nullptr || !fence_->Enqueue(f)) {
      TRAINSUP_LOG_INFO("node %s %s; no --%s-command to tell the scheduler", f.node,
                        f.action == FenceAction::kUnfence ? "unquarantined" : "quarantined",
                        FenceActionName(f.action));
    }
  }
}

void SupervisorHost::NotActedOn(const Effects& effects, const absl::Status& status,
                                bool reporting) {
  ++store_errors_;
  TRAINSUP_LOG_ERROR("state store write failed: %s", status.message());
  if (effects.empty()) return;
  persist_failures_ += effects.sends.size() + effects.fences.size();
  std::vector<std::string> what;
  std::string node;
  for (const Send& send : effects.sends) what.push_back(send.what);
  for (const FenceRequest& f : effects.fences) {
    what.push_back(absl::StrCat(FenceActionName(f.action), " ", f.node));
    if (node.empty()) node = f.node;
  }
  const std::string text =
      absl::StrCat("not acted on, as it could not be persisted: ", ListSome(what),
                   " (", ClipText(status.message(), 256), ")");
  TRAINSUP_LOG_ERROR("%s", text);
  if (reporting) return;  // a failure to record a failure: counted, not looped
  absl::MutexLock lock(&mu_);
  core_->PersistFailed(clock_->Now(), node, text);
  ActLocked(/*reporting=*/true);
}

absl::StatusOr<Supervisor::HelloResult> SupervisorHost::Hello(
    const AgentHelloInfo& hello, std::shared_ptr<AgentChannel> channel) {
  std::shared_ptr<AgentChannel> superseded;
  absl::StatusOr<Supervisor::HelloResult> result;
  {
    absl::MutexLock lock(&mu_);
    result = core_->Hello(clock_->Now(), hello);
    if (!result.ok()) return result;
    // The welcome goes first, before any command the core decided for it.
    v1::SupervisorMessage welcome;
    welcome.set_epoch(static_cast<uint64_t>(epoch_.load()));
    welcome.mutable_welcome()->set_supervisor_incarnation(incarnation_);
    welcome.mutable_welcome()->set_generation(result->generation);
    welcome.mutable_welcome()->set_launch(result->launch);
    welcome.mutable_welcome()->set_restarts(result->restarts);
    if (!result->resume.empty()) {
      *welcome.mutable_welcome()->mutable_resume() = ToProto(result->resume);
    }
    if (result->rendezvous) {
      *welcome.mutable_welcome()->mutable_rendezvous() = ToProto(*result->rendezvous);
    }
    welcome.mutable_welcome()->mutable_settings()->set_report_interval_seconds(
        absl::ToDoubleSeconds(result->report_interval));
    channel->Send(welcome);
    channels_[result->session] = std::move(channel);
    auto it = channels_.find(result->superseded);
    if (it != channels_.end()) {
      superseded = std::move(it->second);
      channels_.erase(it);
    }
    ActLocked();
  }
  if (superseded != nullptr) {
    superseded->Close(grpc::Status(grpc::StatusCode::ABORTED,
                                   "superseded by a newer connection of the same node"));
  }
  return result;
}

absl::Status SupervisorHost::Report(SessionId session, const NodeReportInfo& report) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.Report(now, session, report); });
}

absl::Status SupervisorHost::Stacks(SessionId session, const StacksInfo& stacks) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.Stacks(now, session, stacks); });
}

absl::Status SupervisorHost::GpuError(SessionId session, const GpuErrorInfo& error) {
  return Mutate(
      [&](Supervisor& core, absl::Time now) { return core.GpuError(now, session, error); });
}

absl::Status SupervisorHost::GpuHealth(SessionId session, const GpuHealthInfo& report) {
  return Mutate(
      [&](Supervisor& core, absl::Time now) { return core.GpuHealth(now, session, report); });
}

absl::Status SupervisorHost::Provenance(SessionId session, v1::GenerationProvenance record) {
  std::string job;
  const bool known = Read([&](const Supervisor& core, absl::Time) {
    const NodeRecord* node = core.NodeOfSession(session);
    if (node == nullptr) return false;
    job = node->job;
    record.set_node(node->name);
    return true;
  });
  if (!known) return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  record.clear_first_step();  // trainsupd's, never an agent's
  StoreProvenance(job, std::move(record));
  return absl::OkStatus();  // the agent's stream goes on either way
}

void SupervisorHost::StoreProvenance(const std::string& job, v1::GenerationProvenance record) {
  if (store_ == nullptr) return;
  DropSecrets(&record);
  BoundProvenance(&record);
  absl::Status stored = store_->PutProvenance(job, record, clock_->Now());
  if (!stored.ok()) {
    ++store_errors_;
    TRAINSUP_LOG_ERROR("job %s node %s: the provenance of generation %d was not stored: %s", job,
                       record.node(), record.generation(), stored.message());
  }
}

std::vector<std::pair<std::string, v1::GenerationProvenance>>
SupervisorHost::NewFirstStepsLocked() {
  std::vector<std::pair<std::string, v1::GenerationProvenance>> out;
  for (const JobEntry* entry : core_->Jobs()) {
    const std::optional<StepSummary>& first = entry->signals().first_step();
    const uint64_t generation = entry->signals().record().generation();
    if (!first.has_value()) continue;
    auto [it, added] = first_step_stored_.try_emplace(entry->job().id(), generation);
    if (!added && it->second == generation) continue;
    it->second = generation;
    v1::GenerationProvenance record;
    record.set_generation(generation);
    v1::FirstStep* step = record.mutable_first_step();
    step->set_step(first->step);
    if (first->learning_rate.has_value()) step->set_learning_rate(*first->learning_rate);
    step->set_samples(first->samples);
    step->set_tokens(first->tokens);
    step->set_ranks(first->ranks);
    out.emplace_back(entry->job().id(), std::move(record));
  }
  return out;
}

absl::StatusOr<v1::ProvenanceResponse> SupervisorHost::ProvenanceOf(const std::string& job,
                                                                    uint64_t generation) const {
  std::vector<v1::GenerationProvenance> records;
  if (store_ != nullptr) {
    absl::Status read = store_->Provenance(job, generation, &records);
    if (!read.ok()) return read;
  }
  if (records.empty()) {
    return absl::NotFoundError(absl::StrCat("no provenance of job ", job, " generation ",
                                            generation,
                                            store_ == nullptr ? " (trainsupd keeps none without "
                                                                "a state store)" : ""));
  }
  v1::ProvenanceResponse response;
  response.set_job_id(job);
  response.set_generation(generation);
  for (v1::GenerationProvenance& r : records) {
    if (r.node().empty()) {  // the generation's own record (store/provenance.h)
      *response.mutable_first_step() = r.first_step();
    } else {
      *response.add_nodes() = std::move(r);
    }
  }
  return response;
}

void SupervisorHost::Disconnected(SessionId session) {
  std::shared_ptr<AgentChannel> channel;  // released after the lock
  absl::MutexLock lock(&mu_);
  core_->Disconnected(clock_->Now(), session);
  ActLocked();  // e.g. the node of an ended job as it left
  auto it = channels_.find(session);
  if (it != channels_.end()) {
    channel = std::move(it->second);
    channels_.erase(it);
  }
}

std::vector<Event> SupervisorHost::Sweep() {
  std::vector<std::pair<std::string, v1::GenerationProvenance>> first_steps;
  std::vector<Event> events = Mutate([&](Supervisor& core, absl::Time now) {
    std::vector<Event> swept = core.Sweep(now);
    if (store_ != nullptr) first_steps = NewFirstStepsLocked();
    return swept;
  });
  // Off the lock, as the agents' records are (store_ has its own).
  for (auto& [job, record] : first_steps) StoreProvenance(job, std::move(record));
  return events;
}

absl::StatusOr<std::string> SupervisorHost::SetKillCriteria(
    const std::string& job, const std::optional<KillCriteriaSpec>& spec) {
  return MutateAndPublish(
      [&](Supervisor& core, absl::Time now) { return core.SetKillCriteria(now, job, spec); });
}

absl::StatusOr<std::string> SupervisorHost::Resume(const std::string& job) {
  return MutateAndPublish([&](Supervisor& core, absl::Time now) { return core.Resume(now, job); });
}

absl::StatusOr<std::string> SupervisorHost::Quarantine(const std::string& node,
                                                       const std::string& reason, bool force) {
  return MutateAndPublish(
      [&](Supervisor& core, absl::Time now) { return core.Quarantine(now, node, reason, force); });
}

absl::StatusOr<std::string> SupervisorHost::Unquarantine(const std::string& node) {
  return MutateAndPublish(
      [&](Supervisor& core, absl::Time now) { return core.Unquarantine(now, node); });
}

absl::StatusOr<std::string> SupervisorHost::RequestCheckpoint(const std::string& job) {
  return MutateAndPublish(
      [&](Supervisor& core, absl::Time now) { return core.RequestCheckpoint(now, job); });
}

void SupervisorHost::LeadershipChanged(absl::string_view role, int64_t epoch,
                                       const std::string& reason) {
  if (role == "leader") epoch_.store(epoch);
  MutateAndPublish([&](Supervisor& core, absl::Time now) {
    core.LeadershipChanged(now, role, epoch, reason);
    return 0;
  });
}

void SupervisorHost::FenceDone(const FenceRequest& request, bool ok, const std::string& detail) {
  if (request.action == FenceAction::kUnfence) {
    ++(ok ? unfences_succeeded_ : unfences_failed_);
  } else {
    ++(ok ? fences_succeeded_ : fences_failed_);
  }
  Mutate([&](Supervisor& core, absl::Time now) {
    core.FenceDone(now, request, ok, detail);
    return 0;
  });
}

}  // namespace trainsup
