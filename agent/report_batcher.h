#ifndef TRAINSUP_AGENT_REPORT_BATCHER_H_
#define TRAINSUP_AGENT_REPORT_BATCHER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/rank_watcher.h"
#include "common/limits.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// Collects what the agent will tell the supervisor: heartbeats in arrival
// order, the rank processes, the launcher, the counts of refused datagrams,
// the checkpoint plans held. The event loop adds; the link takes one
// NodeReport per report interval, news or not. While the supervisor is away
// heartbeats wait in a bounded backlog (the oldest are dropped, and counted,
// when it is full), so the training job never waits. Thread-safe.
class ReportBatcher {
 public:
  // REQUIRES: max_backlog >= 1.
  explicit ReportBatcher(size_t max_backlog);

  ReportBatcher(const ReportBatcher&) = delete;
  ReportBatcher& operator=(const ReportBatcher&) = delete;

  // `read_at` (steady clock): when the agent read it from the rank; the
  // report that carries it says how long it waited (queued_seconds).
  void AddHeartbeat(v1::RankHeartbeat hb, std::optional<absl::Duration> read_at = std::nullopt);
  void CountReject(v1::RejectReason reason);
  void SetLauncher(const v1::LauncherStatus& launcher);
  v1::LauncherStatus launcher() const;
  void SetProcesses(std::vector<ProcessObservation> processes);
  void SetGeneration(uint64_t generation);
  // The command was launched as `generation`, its launcher now `launcher`:
  // both at once, so that no report says the new generation with the last
  // one's launcher (its exit read as the new generation's end).
  void StartGeneration(uint64_t generation, const v1::LauncherStatus& launcher);
  uint64_t generation() const;
  // What every report says in plans_held_through (PlanFile::held_through).
  void SetPlansHeldThrough(uint64_t plan_id);

  // A new stream begins: the next report re-sends the latest step and phase
  // of every rank that has nothing newer waiting, so that a supervisor that
  // restarted learns the current state even of ranks that are silent (hung).
  void BeginSession();

  // Everything since the last report, up to `max_bytes` serialized: the
  // heartbeats that do not fit stay first in line for the next report (and
  // `*more`, if given, says so). `steady_now` dates process deaths.
  v1::NodeReport TakeReport(absl::Duration steady_now, size_t max_bytes = kMaxReportBytes,
                            bool* more = nullptr);
  // Below the supervisor's message limit, with room for the envelope.
  static constexpr size_t kMaxReportBytes = kMaxMessageBytes - (64u << 10);

  // A report that could not be sent: its heartbeats go back in front of the
  // backlog (within its bound), to be sent on the next stream.
  void Restore(v1::NodeReport report);

  size_t backlog() const;
  uint64_t dropped_total() const;
  uint64_t heartbeats_added() const;

 private:
  struct Entry {
    int64_t seq;  // arrival order
    v1::RankHeartbeat hb;
    std::optional<absl::Duration> read_at;  // steady clock
  };
  // The last heartbeats of one rank, of the kinds that carry state.
  struct RankLatest {
    std::optional<Entry> step;
    std::optional<Entry> phase;  // COMPUTE_BEGIN / COMPUTE_END
  };
  void PushLocked(Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PrependLatestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetGenerationLocked(uint64_t generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_backlog_;
  mutable absl::Mutex mu_;
  std::deque<Entry> pending_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, RankLatest> latest_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool resend_latest_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t plans_held_through_ ABSL_GUARDED_BY(mu_) = 0;
  v1::LauncherStatus launcher_ ABSL_GUARDED_BY(mu_);
  std::vector<ProcessObservation> processes_ ABSL_GUARDED_BY(mu_);
  // Cumulative, by reason; reported in the enum's order.
  std::map<v1::RejectReason, uint64_t> rejected_ ABSL_GUARDED_BY(mu_);
  // What the heartbeats in the last report taken were, in order, so that a
  // Restore puts them back under their own numbers and read times.
  struct Taken {
    int64_t seq;
    std::optional<absl::Duration> read_at;
  };
  std::vector<Taken> taken_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_REPORT_BATCHER_H_
