// SignalDetection on its own: one job's training-signal rules swept with a
// fake clock, and what it decided read from the events, the failures it
// handed to the FailureHandler (the journal) and the job's state
// (tests/support/core_parts.h). The rules themselves have their own tests
// (non_finite_rule_test.cc, loss_rules_test.cc, ...); these are about what is
// done with a finding: which one stops the job, which one only reports, and
// which node is charged.
#include "daemon/core/signal_detection.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::IsEmpty;
using ::testing::Optional;
using ::trainsup::testing::CorePartsOptions;
using ::trainsup::testing::CorePartsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::kTestWorldSize;
using ::trainsup::testing::MakeHeartbeat;
using ::trainsup::testing::OfKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using LossOf = double (*)(uint32_t rank, int64_t step);
using DigestOf = uint64_t (*)(uint32_t rank, int64_t step);

double NaNOnRank2From20(uint32_t rank, int64_t step) {
  return rank == 2 && step >= 20 ? kNaN : 2.0 + 4.0 / (1 + step);
}
uint64_t Rank3DisagreesFrom20(uint32_t rank, int64_t step) {
  return rank == 3 && step >= 20 ? 0xbad : static_cast<uint64_t>(step);
}

class SignalDetectionTest : public CorePartsTest {
 protected:
  explicit SignalDetectionTest(SupervisorOptions options = CorePartsOptions())
      : CorePartsTest(std::move(options)) {}

  // Steps [from, to), one a second: every rank with `loss_of`'s loss (a
  // healthy fall by default), gradient norm 1 and `digest_of`'s replica
  // digest (the step by default); both agents heard; a sweep after each
  // step. Stops at the first sweep that stopped the job and says whether one
  // did. What was decided piles up in `decided_`.
  bool Steps(int64_t from, int64_t to, LossOf loss_of = nullptr, DigestOf digest_of = nullptr) {
    for (int64_t step = from; step < to; ++step) {
      clock_.Advance(absl::Seconds(1));
      for (uint32_t rank = 0; rank < kTestWorldSize; ++rank) {
        Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, rank, step, kTestWorldSize,
                                     job().job().generation());
        hb.step_duration_s = 1.0;
        hb.loss = loss_of ? loss_of(rank, step) : 2.0 + 4.0 / (1 + step);
        hb.grad_norm = 1.0;
        hb.replica_digest = digest_of ? digest_of(rank, step) : static_cast<uint64_t>(step);
        Beat(hb);
      }
      Heard("node-a");
      Heard("node-b");
      const bool stopped = signals_.Sweep(now(), job());
      Keep(decisions_.Take());
      if (stopped) return true;
    }
    return false;
  }

  std::vector<Event> Events(EventKind kind) const { return OfKind(events_, kind); }
  // Every event of a training signal or a resume finding.
  std::vector<Event> SignalEvents() const {
    std::vector<Event> out;
    for (const Event& e : events_) {
      const EventFamily family = EventKindInfoOf(e.kind).family;
      if (family == EventFamily::kSignal || family == EventFamily::kResume) out.push_back(e);
    }
    return out;
  }

  SignalDetection signals_{options_, agents_, decisions_, failures_, restarts_};
  std::vector<Event> events_;
  std::vector<FailureRow> failures_recorded_;

 private:
  void Keep(const SupervisorOutput& out) {
    events_.insert(events_.end(), out.events.begin(), out.events.end());
    failures_recorded_.insert(failures_recorded_.end(), out.journal.failures.begin(),
                              out.journal.failures.end());
  }
};

// The negative control: a healthy run's falling loss, agreeing replicas.
TEST_F(SignalDetectionTest, AHealthyRunIsNeitherStoppedNorReported) {
  RunJob();
  EXPECT_FALSE(Steps(0, 80));
  EXPECT_THAT(SignalEvents(), IsEmpty());
  EXPECT_THAT(failures_recorded_, IsEmpty());
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
}

TEST_F(SignalDetectionTest, ANonFiniteLossStopsTheJobNamingItsRankAndNode) {
  RunJob();
  ASSERT_TRUE(Steps(0, 40, NaNOnRank2From20));
  const std::vector<Event> found = Events(EventKind::kNotFinite);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(found[0].node, "node-b");
  EXPECT_THAT(Figure(found[0], "step"), Optional(20.0));
  // Handed on as a failure of the job, which stops on every node.
  ASSERT_EQ(failures_recorded_.size(), 1u);
  EXPECT_EQ(failures_recorded_[0].kind, "not_finite");
  EXPECT_EQ(failures_recorded_[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
}

class ObserveOnlySignalDetectionTest : public SignalDetectionTest {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o = CorePartsOptions();
    o.observe_only = true;
    return o;
  }
  ObserveOnlySignalDetectionTest() : SignalDetectionTest(Options()) {}
};

TEST_F(ObserveOnlySignalDetectionTest, ANonFiniteLossIsReportedAndTheJobGoesOn) {
  RunJob();
  EXPECT_FALSE(Steps(0, 40, NaNOnRank2From20));
  const std::vector<Event> found = Events(EventKind::kNotFinite);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
}

TEST_F(ObserveOnlySignalDetectionTest, AReplicaMismatchIsReportedAndNotCharged) {
  RunJob();
  EXPECT_FALSE(Steps(0, 40, nullptr, Rank3DisagreesFrom20));
  const std::vector<Event> found = Events(EventKind::kReplicaMismatch);
  ASSERT_FALSE(found.empty());
  EXPECT_THAT(Figure(found[0], "charged"), Optional(0.0));
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
}

class ReportOnlyNonFiniteTest : public SignalDetectionTest {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o = CorePartsOptions();
    o.signals.non_finite.action = NonFiniteAction::kReport;
    return o;
  }
  ReportOnlyNonFiniteTest() : SignalDetectionTest(Options()) {}
};

// --on-non-finite report: for a framework that skips non-finite steps.
TEST_F(ReportOnlyNonFiniteTest, ANonFiniteLossIsAnEventOnlyAndNoFailure) {
  RunJob();
  EXPECT_FALSE(Steps(0, 40, NaNOnRank2From20));
  EXPECT_EQ(Events(EventKind::kNotFinite).size(), 1u);
  EXPECT_THAT(failures_recorded_, IsEmpty());
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
}

// Silent data corruption is the node's: charged toward its quarantine, the
// job not stopped.
TEST_F(SignalDetectionTest, AReplicaMismatchIsChargedToItsNodeAndTheJobGoesOn) {
  RunJob();
  EXPECT_FALSE(Steps(0, 40, nullptr, Rank3DisagreesFrom20));
  const std::vector<Event> found = Events(EventKind::kReplicaMismatch);
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found[0].rank, std::optional<uint32_t>(3));
  EXPECT_EQ(found[0].node, "node-b");
  EXPECT_THAT(Figure(found[0], "charged"), Optional(1.0));
  ASSERT_FALSE(failures_recorded_.empty());
  EXPECT_EQ(failures_recorded_[0].kind, "replica_mismatch");
  EXPECT_EQ(failures_recorded_[0].node, "node-b");
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
}

}  // namespace
}  // namespace trainsup
