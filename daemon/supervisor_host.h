#ifndef TRAINSUP_DAEMON_SUPERVISOR_HOST_H_
#define TRAINSUP_DAEMON_SUPERVISOR_HOST_H_

#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "daemon/core/supervisor.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

class StateStore;
class FenceRunner;

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
// observation with the clock's time, persists what the core decided (before
// acting on it), sends its commands down the agents' streams, runs fence
// commands, and logs its events. Thread-safe.
class SupervisorHost {
 public:
  // `store` (the SQLite state store) and `fence` may be null: nothing is
  // persisted, no node is fenced. Neither is owned.
  SupervisorHost(SupervisorOptions options, const Clock* clock, StateStore* store = nullptr);

  SupervisorHost(const SupervisorHost&) = delete;
  SupervisorHost& operator=(const SupervisorHost&) = delete;

  // Loads the state store into the core. Call once, before serving.
  absl::Status Restore();
  // Where quarantined nodes are fenced (may be null). Set before serving.
  void set_fence_runner(FenceRunner* fence) { fence_ = fence; }

  // Random per process; agents see it change when the supervisor restarts.
  uint64_t incarnation() const { return incarnation_; }
  const Clock& clock() const { return *clock_; }

  // Registers the agent's channel and sends it the welcome, then whatever
  // the core decided for it.
  absl::StatusOr<Supervisor::HelloResult> Hello(const AgentHelloInfo& hello,
                                                std::shared_ptr<AgentChannel> channel);
  absl::Status Report(SessionId session, const NodeReportInfo& report);
  absl::Status Stacks(SessionId session, const StacksInfo& stacks);
  void Disconnected(SessionId session);

  // Runs the core's sweep at the clock's time. Returns the new events.
  std::vector<Event> Sweep();

  // Operator actions (see Supervisor).
  absl::StatusOr<std::string> Resume(const std::string& job);
  absl::StatusOr<std::string> Quarantine(const std::string& node, const std::string& reason);
  absl::StatusOr<std::string> Unquarantine(const std::string& node);
  absl::StatusOr<std::string> RequestCheckpoint(const std::string& job);
  void FenceDone(const std::string& node, bool ok, const std::string& detail);

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

  // Journals the state store refused (the supervisor goes on: training
  // matters more than its records). Lock-free.
  uint64_t store_errors() const { return store_errors_.load(); }

 private:
  // Runs `fn(Supervisor&, absl::Time now)` under the lock, then acts on
  // what the core decided; returns fn's result.
  template <typename Fn>
  auto Mutate(Fn fn) {
    absl::MutexLock lock(&mu_);
    auto result = fn(core_, clock_->Now());
    ActLocked();
    return result;
  }
  // Acts on what the core decided: persists the journal, then logs the
  // events, sends the commands and queues the fences.
  void ActLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  StateStore* const store_;
  FenceRunner* fence_ = nullptr;
  const uint64_t incarnation_;
  mutable absl::Mutex mu_;
  Supervisor core_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, std::shared_ptr<AgentChannel>> channels_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> store_errors_{0};  // read without mu_ (by the metrics collector)
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SUPERVISOR_HOST_H_
