#ifndef TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_

#include <algorithm>

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

  // A node told to report slowly is never lost for it: it is lost only
  // after this many of its report intervals, whatever --node-lost-after
  // says.
  static constexpr int kLostAfterIntervals = 3;

  // The threshold for `node`: max(lost_after, kLostAfterIntervals x the
  // report interval in force for it).
  absl::Duration LostAfter(const NodeRecord& node) const {
    return std::max(options_.lost_after, kLostAfterIntervals * node.report_interval);
  }

  // Not heard for LostAfter(node).
  bool IsLost(const NodeRecord& node, absl::Time now) const {
    return now - node.last_report > LostAfter(node);
  }

  const NodeLossOptions& options() const { return options_; }

 private:
  const NodeLossOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_NODE_LOSS_DETECTOR_H_
