#ifndef TRAINSUP_DAEMON_HA_ETCD_STATE_LOG_H_
#define TRAINSUP_DAEMON_HA_ETCD_STATE_LOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/ha/election.h"
#include "daemon/ha/state_keys.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace trainsup {

// The durable state shared by the instances of one election: a log of the
// leader's committed changes (opaque bytes to it: SQLite changesets), and a
// snapshot the log is compacted into. What the rest of trainsupd depends
// on; EtcdStateLog keeps it in etcd. Thread-safe.
class SharedLog {
 public:
  virtual ~SharedLog() = default;

  // Everything shared: the snapshot's changes (may be empty) then the log's
  // entries after it, in order. Positions the log after its last entry.
  struct Loaded {
    std::string snapshot;
    std::vector<std::string> entries;
    bool empty() const { return snapshot.empty() && entries.empty(); }
  };
  virtual absl::StatusOr<Loaded> Load() = 0;
  // Appends `changes` as the next entry, only while this instance still
  // holds the leadership it was elected with (empty `changes`: no entry,
  // the leadership is only checked). Errors: FailedPrecondition when it no
  // longer does (the write is refused: it must stop acting); Unavailable or
  // DeadlineExceeded when etcd did not answer (nothing known written: retry).
  virtual absl::Status Append(const std::string& changes) = 0;
  // Replaces the log so far with `snapshot`, the state after its last entry;
  // fenced as Append.
  virtual absl::Status Compact(const std::string& snapshot) = 0;
  // Whether Compact is due.
  virtual bool CompactionDue() const = 0;

  // For /metrics: entries appended, writes refused as a deposed leader's,
  // writes the store did not answer, compactions. Lock-free.
  struct Counts {
    uint64_t appended = 0;
    uint64_t refused = 0;
    uint64_t unavailable = 0;
    uint64_t compactions = 0;
  };
  virtual Counts counts() const { return {}; }
};

// SharedLog in etcd, under the election's prefix (state_keys.h has the
// layout). Each write is one etcd transaction that succeeds only if the
// election key this instance holds still has the create revision it won
// with: a deposed leader's key is gone (its lease expired or was revoked),
// so its writes fail however late they arrive.
class EtcdStateLog : public SharedLog {
 public:
  struct Options {
    std::string key_prefix = "/trainsup/default/";
    // The largest value one request carries; etcd refuses requests above
    // --max-request-bytes (1.5 MiB by default). Default: 1 MiB.
    size_t max_part_bytes = 1u << 20;
    absl::Duration call_timeout = absl::Seconds(2);
    CompactionPolicy compaction;
  };
  // `channel` to etcd; `token` says, when asked, what the writes are fenced
  // on (called on the writing thread).
  EtcdStateLog(std::shared_ptr<grpc::Channel> channel, Options options,
               std::function<FencingToken()> token);

  EtcdStateLog(const EtcdStateLog&) = delete;
  EtcdStateLog& operator=(const EtcdStateLog&) = delete;

  absl::StatusOr<Loaded> Load() override;
  absl::Status Append(const std::string& changes) override;
  absl::Status Compact(const std::string& snapshot) override;
  bool CompactionDue() const override;

  Counts counts() const override {
    return {appended_.load(), refused_.load(), unavailable_.load(), compactions_.load()};
  }

 private:
  // One transaction, fenced on `token`: `ops` if the election key is still
  // the one won. FailedPrecondition when it is not.
  absl::Status FencedTxn(const FencingToken& token, std::vector<etcdserverpb::RequestOp> ops);
  // Writes `blob`'s parts under kind/seq, each fenced; returns their count.
  absl::StatusOr<size_t> WriteParts(const FencingToken& token, absl::string_view kind,
                                    uint64_t seq, absl::string_view blob);
  // The values of every key under `prefix` at `revision` (0: now), in key
  // order; `revision` is set to the one read when 0.
  absl::Status RangePrefix(const std::string& prefix, int64_t* revision,
                           std::vector<std::pair<std::string, std::string>>* kvs);
  absl::StatusOr<std::string> ReadParts(absl::string_view kind, uint64_t seq, size_t parts,
                                        int64_t* revision);
  // The token now, or FailedPrecondition (counted) when not elected.
  absl::StatusOr<FencingToken> Token();
  std::chrono::system_clock::time_point Deadline() const;

  const Options options_;
  const StateKeys keys_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  const std::function<FencingToken()> token_;
  mutable absl::Mutex mu_;  // one writer at a time; the position below
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t since_snapshot_entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t since_snapshot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> appended_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> unavailable_{0};
  std::atomic<uint64_t> compactions_{0};
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_ETCD_STATE_LOG_H_
