#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_SIGNAL_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_SIGNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/signal_rule.h"
#include "daemon/core/signals/throughput_rule.h"

namespace trainsup {

// The throughput signal of one generation (docs/signals.md, "Throughput"):
// a ThroughputRule on the job's step time and one on each node's compute
// time (the mean of its ranks'), and which of them a slowdown is. A node
// whose compute slowed alone is named; several slowing together are the
// job's change; a job's slowdown that one node's compute shares names that
// node, whichever of the two confirms first (the other is waited for,
// max(confirm_time, 5 s)). Events kThroughputChange, kThroughputDecay; the
// gauge step_time_ratio. Thread-compatible.
class ThroughputSignalRule : public SignalRule {
 public:
  explicit ThroughputSignalRule(const ThroughputOptions& options)
      : options_(options), job_rule_(options) {}

  void ObserveRank(absl::Time now, const RankAt& at, const Heartbeat& hb) override;
  void ObserveStep(const StepSignals& step) override;
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override;
  void Gauges(std::vector<std::pair<std::string, double>>& out) const override;
  void MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) override;

  // What Sweep found, before it is made an event (for its tests).
  std::vector<ThroughputSignal> Check(absl::Time now);

 private:
  // A node's compute time per step (the mean of its ranks'), and its rule.
  struct NodeCompute {
    explicit NodeCompute(const ThroughputOptions& o) : rule(o) {}
    int64_t step = -1;
    absl::Time time;
    double sum = 0;
    uint32_t n = 0;
    ThroughputRule rule;
  };
  // A node's slowdown held back while the job's step time may be moving
  // with it (then the job's finding names it).
  struct PendingNode {
    NodeIndex node = kNoNode;
    ThroughputFinding finding;
    absl::Time until;
  };
  // The job's slowdown held back while one node's compute is building a
  // slowdown of its own (then the job's finding names that node).
  struct PendingJob {
    ThroughputFinding finding;
    absl::Time until;
  };

  const ThroughputOptions options_;
  ThroughputRule job_rule_;
  absl::flat_hash_map<NodeIndex, NodeCompute> nodes_;
  std::optional<PendingNode> pending_node_;
  std::optional<PendingJob> pending_job_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_SIGNAL_H_
