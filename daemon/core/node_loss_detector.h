#ifndef TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"

namespace trainsup {

struct NodeLossOptions {
  // An agent not heard for this long while its node runs the job's
  // generation is unreachable: an event, and its ranks' liveness becomes
  // unknown. Agents report every --report-interval, idle or not, so silence
  // means the agent, its host or the network between is gone. Nothing is
  // stopped for it while the job keeps stepping. Default: 15s.
  absl::Duration lost_after = absl::Seconds(15);
};

// Tells, from when each agent was last heard (the supervisor's receive time,
// never the agent's clock), which nodes the supervisor has lost sight of.
// Pure; immutable after construction.
class NodeLossDetector {
 public:
  // A node whose agent has missed this many report intervals (and at least
  // two seconds of them) is silent: what it last said of its ranks is no
  // evidence of what they do now.
  static constexpr int kSilentAfterIntervals = 10;

  explicit NodeLossDetector(NodeLossOptions options) : options_(options) {}

  // Its stream is closed, or it has not been heard for longer than
  // max(2s, kSilentAfterIntervals report intervals, `at_least`): its ranks'
  // last state may be stale.
  static bool IsSilent(const NodeRecord& node, absl::Time now,
                       absl::Duration at_least = absl::ZeroDuration());

  // Heard within max(2s, kSilentAfterIntervals report intervals), whether
  // or not its stream is open now (a stream that just broke is an agent
  // reconnecting).
  static bool RecentlyHeard(const NodeRecord& node, absl::Time now);

  // Not heard for `lost_after`.
  bool IsLost(const NodeRecord& node, absl::Time now) const {
    return now - node.last_report > options_.lost_after;
  }

  const NodeLossOptions& options() const { return options_; }

 private:
  const NodeLossOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_
