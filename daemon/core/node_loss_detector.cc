#include "daemon/core/node_loss_detector.h"

#include <algorithm>

namespace trainsup {

namespace {

absl::Duration SilenceBound(const NodeRecord& node, absl::Duration at_least) {
  return std::max({absl::Seconds(2), NodeLossDetector::kSilentAfterIntervals * node.report_interval,
                   at_least});
}

}  // namespace

bool NodeLossDetector::IsSilent(const NodeRecord& node, absl::Time now, absl::Duration at_least) {
  return !node.connected || now - node.last_report > SilenceBound(node, at_least);
}

bool NodeLossDetector::RecentlyHeard(const NodeRecord& node, absl::Time now) {
  return now - node.last_report <= SilenceBound(node, absl::ZeroDuration());
}

}  // namespace trainsup
