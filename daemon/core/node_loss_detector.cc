#include "daemon/core/node_loss_detector.h"

#include <algorithm>

namespace trainsup {

bool NodeLossDetector::IsSilent(const NodeRecord& node, absl::Time now, absl::Duration at_least) {
  if (!node.connected) return true;
  const absl::Duration bound =
      std::max({absl::Seconds(2), kSilentAfterIntervals * node.report_interval, at_least});
  return now - node.last_report > bound;
}

}  // namespace trainsup
