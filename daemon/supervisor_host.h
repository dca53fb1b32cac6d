#ifndef TRAINSUP_DAEMON_SUPERVISOR_HOST_H_
#define TRAINSUP_DAEMON_SUPERVISOR_HOST_H_

#include <cstdint>
#include <memory>

#include <grpcpp/support/status.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "daemon/core/supervisor.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// The way down to one agent: its stream's outbox. Implementations must not
// block and must accept calls after their stream ended (and drop them).
class AgentChannel {
 public:
  virtual ~AgentChannel() = default;
  virtual void Send(const v1::SupervisorMessage& message) = 0;
  // Ends the stream with `status` once queued messages are written.
  virtual void Close(const grpc::Status& status) = 0;
};

// Drives the pure core: serializes access to it with one mutex, stamps every
// observation with the clock's time, and keeps the channel of each agent
// session so that decisions can reach the agents. Thread-safe.
class SupervisorHost {
 public:
  SupervisorHost(SupervisorOptions options, const Clock* clock);

  SupervisorHost(const SupervisorHost&) = delete;
  SupervisorHost& operator=(const SupervisorHost&) = delete;

  // Random per process; agents see it change when the supervisor restarts.
  uint64_t incarnation() const { return incarnation_; }
  const Clock& clock() const { return *clock_; }

  absl::StatusOr<Supervisor::HelloResult> Hello(const AgentHelloInfo& hello,
                                                std::shared_ptr<AgentChannel> channel);
  absl::Status Report(SessionId session, const NodeReportInfo& report);
  void Disconnected(SessionId session);

  // Runs the core's detectors at the clock's time; logs each new event and
  // wakes the event watchers. Returns the new events.
  std::vector<Event> Sweep();

  // Events with id > `after_id` (of `job` only, unless empty). Blocks up to
  // `timeout` for any new event; returns what there is then (maybe nothing)
  // and sets `*scanned_to` to the last id looked at (of any job), from where
  // the next call should go on.
  std::vector<Event> WaitForEvents(uint64_t after_id, const std::string& job,
                                   absl::Duration timeout, uint64_t* scanned_to) const;

  // Runs `fn(const Supervisor&, absl::Time now)` under a shared lock and
  // returns its result. `fn` must not call back into the host.
  template <typename Fn>
  auto Read(Fn fn) const {
    absl::ReaderMutexLock lock(&mu_);
    return fn(static_cast<const Supervisor&>(core_), clock_->Now());
  }

 private:
  const Clock* const clock_;
  const uint64_t incarnation_;
  mutable absl::Mutex mu_;
  Supervisor core_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, std::shared_ptr<AgentChannel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SUPERVISOR_HOST_H_
