#include "daemon/supervisor_host.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/random_id.h"
#include "daemon/fence_runner.h"
#include "daemon/proto_convert.h"
#include "daemon/state_store.h"

namespace trainsup {
namespace {

// How many records of each kind come back from the store at start-up.
constexpr size_t kRestoreEvents = 10000;
constexpr size_t kRestoreFailures = 100000;
constexpr size_t kRestoreRestarts = 100000;

}  // namespace

SupervisorHost::SupervisorHost(SupervisorOptions options, const Clock* clock, StateStore* store)
    : clock_(clock), store_(store), incarnation_(RandomId()), core_(options) {}

absl::Status SupervisorHost::Restore() {
  if (store_ == nullptr) return absl::OkStatus();
  absl::StatusOr<PersistedState> state = store_->Load(kRestoreEvents, kRestoreFailures, kRestoreRestarts);
  if (!state.ok()) return state.status();
  absl::MutexLock lock(&mu_);
  core_.Restore(clock_->Now(), *state);
  size_t quarantined = 0;
  for (const NodeRecordRow& n : state->nodes) quarantined += n.quarantined ? 1 : 0;
  TRAINSUP_LOG_INFO("state restored: %d jobs, %d nodes (%d quarantined), %d failures, %d restarts, "
                    "%d events",
                    state->jobs.size(), state->nodes.size(), quarantined, state->failures.size(),
                    state->restarts.size(), state->events.size());
  return absl::OkStatus();
}

void SupervisorHost::ActLocked() {
  SupervisorOutput output = core_.TakeOutput();
  // Persist first: after a crash, the records are ahead of the agents, never
  // behind them.
  if (store_ != nullptr && !output.journal.empty()) {
    absl::Status s = store_->Apply(output.journal);
    if (!s.ok()) {
      ++store_errors_;
      TRAINSUP_LOG_ERROR("state store write failed (acting anyway): %s", s.message());
    }
  }
  for (const Event& e : output.events) {
    TRAINSUP_LOG_INFO("event %d %s job=%s generation=%d%s: %s", e.id, EventKindName(e.kind), e.job,
                      e.generation, e.node.empty() ? "" : " node=" + e.node, e.message);
  }
  // Sends only queue on the stream (never block, never call back in), so they
  // happen under the lock: commands reach each agent in the order decided.
  for (const AgentCommand& c : output.commands) {
    auto it = channels_.find(c.session);
    if (it != channels_.end()) it->second->Send(ToProto(c));
  }
  for (const FenceRequest& f : output.fences) {
    if (fence_ != nullptr) {
      fence_->Enqueue(f.node, f.reason);
    } else {
      TRAINSUP_LOG_INFO("node %s quarantined; no --fence-command to tell the scheduler", f.node);
    }
  }
}

absl::StatusOr<Supervisor::HelloResult> SupervisorHost::Hello(
    const AgentHelloInfo& hello, std::shared_ptr<AgentChannel> channel) {
  std::shared_ptr<AgentChannel> superseded;
  absl::StatusOr<Supervisor::HelloResult> result;
  {
    absl::MutexLock lock(&mu_);
    result = core_.Hello(clock_->Now(), hello);
    if (!result.ok()) return result;
    // The welcome goes first, before any command the core decided for it.
    v1::SupervisorMessage welcome;
    welcome.mutable_welcome()->set_supervisor_incarnation(incarnation_);
    welcome.mutable_welcome()->set_generation(result->generation);
    welcome.mutable_welcome()->set_launch(result->launch);
    welcome.mutable_welcome()->set_restarts(result->restarts);
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

void SupervisorHost::Disconnected(SessionId session) {
  std::shared_ptr<AgentChannel> channel;  // released after the lock
  absl::MutexLock lock(&mu_);
  core_.Disconnected(clock_->Now(), session);
  auto it = channels_.find(session);
  if (it != channels_.end()) {
    channel = std::move(it->second);
    channels_.erase(it);
  }
}

std::vector<Event> SupervisorHost::Sweep() {
  return Mutate([](Supervisor& core, absl::Time now) { return core.Sweep(now); });
}

absl::StatusOr<std::string> SupervisorHost::Resume(const std::string& job) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.Resume(now, job); });
}

absl::StatusOr<std::string> SupervisorHost::Quarantine(const std::string& node,
                                                       const std::string& reason) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.Quarantine(now, node, reason); });
}

absl::StatusOr<std::string> SupervisorHost::Unquarantine(const std::string& node) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.Unquarantine(now, node); });
}

absl::StatusOr<std::string> SupervisorHost::RequestCheckpoint(const std::string& job) {
  return Mutate([&](Supervisor& core, absl::Time now) { return core.RequestCheckpoint(now, job); });
}

void SupervisorHost::FenceDone(const std::string& node, bool ok, const std::string& detail) {
  Mutate([&](Supervisor& core, absl::Time now) {
    core.FenceDone(now, node, ok, detail);
    return 0;
  });
}

std::vector<Event> SupervisorHost::WaitForEvents(uint64_t after_id, const std::string& job,
                                                 absl::Duration timeout,
                                                 uint64_t* scanned_to) const {
  auto has_new = [this, after_id]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return core_.events().last_id() > after_id;
  };
  mu_.ReaderLockWhenWithTimeout(absl::Condition(&has_new), timeout);
  std::vector<Event> events = core_.events().Since(after_id, job);
  *scanned_to = std::max(after_id, core_.events().last_id());
  mu_.ReaderUnlock();
  return events;
}

}  // namespace trainsup
