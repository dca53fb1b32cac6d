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
#include "daemon/journal_writer.h"
#include "daemon/snapshot_publisher.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/operator.pb.h"
#include "trainsup/v1/provenance.pb.h"

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
// observation with the clock's time, persists what the core decided, sends
// its commands down the agents' streams and runs fence commands once that
// is committed, and logs its events. Thread-safe.
//
// Commits happen on a writer thread (JournalWriter), off the mutex that
// agent streams take: a slow disk delays commands and fences, never the
// ingest of reports. What could not be persisted is not acted on: a
// `persist_failed` event and persist_failures() say so.
//
// With a store, readers see an event (Events, WaitForEvents) once its
// journal's commit ended: committed, or failed (the persist_failed event
// says so), never when it was void (JournalSink: Aborted, a fenced leader).
// So an id a follower has seen is durable and is never given to another
// event by a restart or by a new leader (docs/ha.md, "One history").
class SupervisorHost {
 public:
  // `store` (the SQLite state store) and the fence runner may be null:
  // nothing is persisted, no node is fenced. Journals are written to `sink`
  // when given (a test's stand-in), else to `store`. None is owned; each must
  // outlive the host.
  SupervisorHost(SupervisorOptions options, const Clock* clock, StateStore* store = nullptr,
                 JournalSink* sink = nullptr);

  SupervisorHost(const SupervisorHost&) = delete;
  SupervisorHost& operator=(const SupervisorHost&) = delete;

  // Builds the core afresh from the state store, and runs again the fences
  // it kept as pending. Call before serving, after set_fence_runner(); and
  // again, under an election, whenever this instance acts after a time it
  // did not (docs/ha.md): it heard nothing from the agents then, so their
  // silence is no evidence, and it starts over from what it committed, as
  // a new leader would.
  absl::Status Restore();
  // Where quarantined nodes are fenced (may be null: fences stay pending in
  // the store). Set before serving; null it before the runner goes away.
  void set_fence_runner(FenceRunner* fence);
  // Returns once everything decided so far is committed and acted on.
  void FlushWrites();

  // Random per process; agents see it change when the supervisor restarts.
  uint64_t incarnation() const { return incarnation_; }
  const Clock& clock() const { return *clock_; }

  // Registers the agent's channel and sends it the welcome, then whatever
  // the core decided for it.
  absl::StatusOr<Supervisor::HelloResult> Hello(const AgentHelloInfo& hello,
                                                std::shared_ptr<AgentChannel> channel);
  absl::Status Report(SessionId session, const NodeReportInfo& report);
  absl::Status Stacks(SessionId session, const StacksInfo& stacks);
  absl::Status GpuError(SessionId session, const GpuErrorInfo& error);
  absl::Status GpuHealth(SessionId session, const GpuHealthInfo& report);
  // Stores what the session's node launched for a generation
  // (docs/provenance.md), named by the session's job and node whatever the
  // record says, with secret-looking variables dropped and bounded to
  // kMaxProvenanceBytes. Not kept without a state store.
  absl::Status Provenance(SessionId session, v1::GenerationProvenance record);
  // The records of one generation of a job, by node, and its first step.
  // NotFound when there is none (or no state store).
  absl::StatusOr<v1::ProvenanceResponse> ProvenanceOf(const std::string& job,
                                                      uint64_t generation) const;
  void Disconnected(SessionId session);

  // Runs the core's sweep at the clock's time. Returns the new events. A
  // generation's first step seen since is stored in its provenance.
  std::vector<Event> Sweep();

  // Operator actions (see Supervisor).
  absl::StatusOr<std::string> Resume(const std::string& job);
  absl::StatusOr<std::string> SetKillCriteria(const std::string& job,
                                              const std::optional<KillCriteriaSpec>& spec);
  absl::StatusOr<std::string> Quarantine(const std::string& node, const std::string& reason,
                                         bool force = false);
  absl::StatusOr<std::string> Unquarantine(const std::string& node);
  absl::StatusOr<std::string> RequestCheckpoint(const std::string& job);
  // Under an election (docs/ha.md): this instance's role changed (an event).
  void LeadershipChanged(absl::string_view role, int64_t epoch, const std::string& reason);
  // The fence runner's report: `request`'s command ended.
  void FenceDone(const FenceRequest& request, bool ok, const std::string& detail);

  // What operators read, published apart from the core (see
  // SnapshotPublisher): reading never takes the lock that ingest holds.
  std::shared_ptr<const OperatorSnapshot> Snapshot() const { return publisher_->Current(); }
  // Events with id > `after_id` (of `job` only, unless empty), at most `limit`.
  std::vector<Event> Events(uint64_t after_id, const std::string& job, size_t limit) const {
    return publisher_->Events(after_id, job, limit);
  }
  // Like Events, blocking up to `timeout` for any new event; returns what
  // there is then (maybe nothing) and sets `*scanned_to` to the last id
  // looked at (of any job), from where the next call should go on.
  std::vector<Event> WaitForEvents(uint64_t after_id, const std::string& job,
                                   absl::Duration timeout, uint64_t* scanned_to) const {
    return publisher_->WaitForEvents(after_id, job, timeout, scanned_to);
  }
  absl::Duration snapshot_capture_duration() const { return publisher_->last_capture_duration(); }

  // Runs `fn(const Supervisor&, absl::Time now)` under a shared lock and
  // returns its result. `fn` must not call back into the host. For tests,
  // /metrics and the rare reads of what snapshots leave out (stacks).
  template <typename Fn>
  auto Read(Fn fn) const {
    absl::ReaderMutexLock lock(&mu_);
    return fn(static_cast<const Supervisor&>(*core_), clock_->Now());
  }

  // Journals (and provenance records) the state store refused. Lock-free.
  uint64_t store_errors() const { return store_errors_.load(); }
  // Commands and fences not acted on because their journal could not be
  // committed. Lock-free.
  uint64_t persist_failures() const { return persist_failures_.load(); }
  // Fence and unfence commands that ended, by result. Lock-free.
  uint64_t fences_succeeded() const { return fences_succeeded_.load(); }
  uint64_t fences_failed() const { return fences_failed_.load(); }
  uint64_t unfences_succeeded() const { return unfences_succeeded_.load(); }
  uint64_t unfences_failed() const { return unfences_failed_.load(); }

 private:
  // Runs `fn(Supervisor&, absl::Time now)` under the lock, then acts on
  // what the core decided; returns fn's result.
  template <typename Fn>
  auto Mutate(Fn fn) {
    absl::MutexLock lock(&mu_);
    auto result = fn(*core_, clock_->Now());
    ActLocked();
    return result;
  }
  // Mutate, then publish at once: an operator's action shows in its next read.
  template <typename Fn>
  auto MutateAndPublish(Fn fn) {
    auto result = Mutate(fn);
    publisher_->PublishNow();
    return result;
  }
  // The first steps of generations the core saw since the last call, as
  // the generations' own provenance records (job, record).
  std::vector<std::pair<std::string, v1::GenerationProvenance>> NewFirstStepsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `record` of `job` (bounded, no secret); a failure is logged and
  // counted, never returned.
  void StoreProvenance(const std::string& job, v1::GenerationProvenance record);
  // What a decision does outside the supervisor, once it is committed.
  struct Send {
    std::shared_ptr<AgentChannel> channel;
    v1::SupervisorMessage message;
    std::string what;  // "stop node-a", for the persist_failed event
  };
  struct Effects {
    std::vector<Send> sends;
    std::vector<FenceRequest> fences;
    bool empty() const { return sends.empty() && fences.empty(); }
  };
  // Acts on what the core decided: logs the events, and queues the journal
  // for its commit, after which the commands are sent and the fences run
  // (in the order decided). `reporting` marks the journal of a
  // persist_failed event, whose own failure is only counted.
  void ActLocked(bool reporting = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Perform(const Effects& effects);
  // The journal of `effects` could not be committed: count it, say so.
  void NotActedOn(const Effects& effects, const absl::Status& status, bool reporting);
  // Readers may see the events up to `id` (ids only grow). Lock-free.
  void ShowEventsThrough(uint64_t id);

  const Clock* const clock_;
  StateStore* const store_;
  const uint64_t incarnation_;
  // The epoch of this instance's leadership (0: no election), stamped on
  // every message decided for an agent.
  std::atomic<int64_t> epoch_{0};
  const SupervisorOptions options_;  // for each core Restore() builds
  mutable absl::Mutex mu_;
  std::unique_ptr<Supervisor> core_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, std::shared_ptr<AgentChannel>> channels_ ABSL_GUARDED_BY(mu_);
  // Per job: the generation whose first step was last stored.
  absl::flat_hash_map<std::string, uint64_t> first_step_stored_ ABSL_GUARDED_BY(mu_);
  absl::Mutex fence_mu_;  // the writer thread reads fence_; Shutdown nulls it
  FenceRunner* fence_ ABSL_GUARDED_BY(fence_mu_) = nullptr;
  std::atomic<uint64_t> store_errors_{0};  // read without mu_ (by the metrics collector)
  std::atomic<uint64_t> persist_failures_{0};
  std::atomic<uint64_t> fences_succeeded_{0};
  std::atomic<uint64_t> fences_failed_{0};
  std::atomic<uint64_t> unfences_succeeded_{0};
  std::atomic<uint64_t> unfences_failed_{0};
  // The highest event id readers may see (with a store; see the class
  // comment). Read by the publisher's capture, raised by commits.
  std::atomic<uint64_t> events_shown_through_{0};
  // After the core and its lock, which its thread reads: stopped before them.
  std::unique_ptr<SnapshotPublisher> publisher_;
  // Last: destroyed (drained and joined) first, while what its
  // continuations use is still there. Null without a store.
  std::unique_ptr<JournalWriter> writer_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SUPERVISOR_HOST_H_
