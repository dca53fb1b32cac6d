#include "daemon/supervisor_host.h"

#include <random>
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

}  // namespace trainsup
