#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_REPLICA_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_REPLICA_RULE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// Ranks of a replica group that disagree with its majority at a step,
// by node: one finding per node (or, with no majority, per group).
struct ReplicaFinding {
  int64_t step = -1;
  uint32_t group = 0;
  uint32_t group_ranks = 0;
  uint32_t majority = 0;
  uint32_t disagreeing = 0;  // in the group at the step
  bool no_majority = false;
  // The first disagreeing rank on the node and how many of the named
  // disagreeing ranks are there (no_majority: none named).
  RankAt at;
  uint32_t on_node = 0;
};

// Replica disagreement (silent data corruption): the step aggregator finds
// the groups whose digests differ; this rule names, per node, the first
// rank that disagrees with its group's majority, at most once per node
// every `rearm_steps` steps (a corrupted replica disagrees at every step
// after). A group without a majority (two replicas that differ) is reported
// without a rank, once per group every `rearm_steps`. Thread-compatible.
class ReplicaRule {
 public:
  explicit ReplicaRule(const ReplicaOptions& options) : options_(options) {}

  void Observe(const ReplicaDisagreement& d);
  // The findings since the last call.
  std::vector<ReplicaFinding> Take();
  // Ranks found disagreeing (one per rank and step), for the metric.
  uint64_t mismatches() const { return mismatches_; }

 private:
  // Whether `last` (the step of the key's last finding) lets `step` be one.
  bool Due(absl::flat_hash_map<uint32_t, int64_t>& last, uint32_t key, int64_t step) const;

  const ReplicaOptions options_;
  absl::flat_hash_map<uint32_t, int64_t> last_by_node_;
  absl::flat_hash_map<uint32_t, int64_t> last_by_group_;
  uint64_t mismatches_ = 0;
  std::vector<ReplicaFinding> found_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_REPLICA_RULE_H_
