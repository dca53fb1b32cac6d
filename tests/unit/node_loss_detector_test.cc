// The node-loss rule (daemon/core/node_loss_detector.h) on a fake clock: a
// node told to report slowly is never lost for it.
#include "daemon/core/node_loss_detector.h"

#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

NodeRecord Heard(double at_s, absl::Duration interval) {
  NodeRecord node;
  node.name = "n1";
  node.connected = true;
  node.last_report = AtS(at_s);
  node.report_interval = interval;
  return node;
}

NodeLossDetector Detector() {
  NodeLossOptions o;
  o.lost_after = absl::Seconds(15);
  return NodeLossDetector(o);
}

TEST(NodeLossDetectorTest, AFastReporterIsLostAfterNodeLostAfter) {
  const NodeLossDetector detector = Detector();
  const NodeRecord node = Heard(0, absl::Milliseconds(200));
  EXPECT_EQ(detector.LostAfter(node), absl::Seconds(15));
  EXPECT_FALSE(detector.IsLost(node, AtS(15)));
  EXPECT_TRUE(detector.IsLost(node, AtS(15.1)));
}

TEST(NodeLossDetectorTest, ASlowReporterIsLostOnlyAfterThreeOfItsIntervals) {
  const NodeLossDetector detector = Detector();
  const NodeRecord node = Heard(0, absl::Seconds(10));
  EXPECT_EQ(detector.LostAfter(node), 3 * absl::Seconds(10));
  EXPECT_FALSE(detector.IsLost(node, AtS(29.9)));
  EXPECT_TRUE(detector.IsLost(node, AtS(30.1)));
}

TEST(NodeLossDetectorTest, ANodeReportingOnTimeAtASlowIntervalIsNeverLost) {
  const NodeLossDetector detector = Detector();
  // Reports every 5 s (the longest interval trainsupd tells by default),
  // each a little late; checked every 100 ms for ten minutes.
  NodeRecord node = Heard(0, absl::Seconds(5));
  double next = 5.4;
  for (int tick = 0; tick <= 6000; ++tick) {
    const double t = tick * 0.1;
    if (t >= next) {
      node.last_report = AtS(t);
      next += 5.4;
    }
    ASSERT_FALSE(detector.IsLost(node, AtS(t))) << "at " << t;
    ASSERT_FALSE(NodeLossDetector::IsSilent(node, AtS(t))) << "at " << t;
  }
}

}  // namespace
}  // namespace trainsup
