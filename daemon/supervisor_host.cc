#include "daemon/supervisor_host.h"

#include <algorithm>
#include <random>
#include <string>

#include "absl/strings/str_join.h"
#include "common/log.h"
#include <utility>

namespace trainsup {
namespace {

uint64_t RandomId() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

SupervisorHost::SupervisorHost(SupervisorOptions options, const Clock* clock)
    : clock_(clock), incarnation_(RandomId()), core_(options) {}

absl::StatusOr<Supervisor::HelloResult> SupervisorHost::Hello(
    const AgentHelloInfo& hello, std::shared_ptr<AgentChannel> channel) {
  std::shared_ptr<AgentChannel> superseded;
  absl::StatusOr<Supervisor::HelloResult> result;
  {
    absl::MutexLock lock(&mu_);
    result = core_.Hello(clock_->Now(), hello);
    if (!result.ok()) return result;
    channels_[result->session] = std::move(channel);
    auto it = channels_.find(result->superseded);
    if (it != channels_.end()) {
      superseded = std::move(it->second);
      channels_.erase(it);
    }
  }
  // Outside the lock: closing may run stream callbacks that call back in.
  if (superseded != nullptr) {
    superseded->Close(grpc::Status(grpc::StatusCode::ABORTED,
                                   "superseded by a newer connection of the same node"));
  }
  return result;
}

absl::Status SupervisorHost::Report(SessionId session, const NodeReportInfo& report) {
  absl::MutexLock lock(&mu_);
  return core_.Report(clock_->Now(), session, report);
}

void SupervisorHost::Disconnected(SessionId session) {
  std::shared_ptr<AgentChannel> channel;
  absl::MutexLock lock(&mu_);
  core_.Disconnected(clock_->Now(), session);
  auto it = channels_.find(session);
  if (it != channels_.end()) {
    channel = std::move(it->second);
    channels_.erase(it);
  }
}

std::vector<Event> SupervisorHost::Sweep() {
  std::vector<Event> events;
  {
    absl::MutexLock lock(&mu_);
    events = core_.Sweep(clock_->Now());
  }
  for (const Event& e : events) {
    TRAINSUP_LOG_INFO("event %d %s job=%s generation=%d: %s", e.id, EventKindName(e.kind), e.job,
                      e.generation, e.message);
  }
  return events;
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
