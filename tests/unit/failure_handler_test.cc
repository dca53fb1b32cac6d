// FailureHandler on its own: what is done about a failure a rule found (a
// record, a restart or a hold, a charge against its node, a quarantine and
// its fence), the job's own verdicts, and the operator's quarantine verbs.
// Driven by a fake clock; read from the decisions it leaves.
#include "daemon/core/failure_handler.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::trainsup::testing::CorePartsOptions;
using ::trainsup::testing::CorePartsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

class FailureHandlerTest : public CorePartsTest {
 protected:
  explicit FailureHandlerTest(SupervisorOptions options = CorePartsOptions())
      : CorePartsTest(std::move(options)) {}

  // A failure of `kind` on `node` at rank `rank`, a second before now.
  Failure FailureOn(const std::string& kind, const std::string& node, bool charged,
                    uint32_t rank = 2) {
    Failure f;
    f.kind = kind;
    f.node = Index(node);
    f.charged = charged;
    f.rank = rank;
    f.failed_at = now() - absl::Seconds(1);
    f.message = kind + " of rank " + std::to_string(rank);
    return f;
  }
  // A crash of rank 2 on node-b with the job's own verdict `action`.
  Failure WithVerdict(VerdictAction action) {
    Failure f = FailureOn("crash", "node-b", /*charged=*/false);
    Verdict v;
    v.action = action;
    v.source = Verdict::Source::kExitCode;
    v.found_by = "the job's rule";
    f.verdict = v;
    f.exit_code = 16;
    if (action == VerdictAction::kRestartElsewhere) {
      f.kind = kRestartElsewhereFailure;
      f.charged = true;
    }
    return f;
  }
};

TEST_F(FailureHandlerTest, JobFailureIsRecordedStopsTheJobAndChargesItsNode) {
  RunJob();
  failures_.OnJobFailure(now(), job(), FailureOn("crash", "node-b", /*charged=*/true));

  SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.journal.failures.size(), 1u);
  const FailureRow& row = out.journal.failures[0];
  EXPECT_EQ(row.kind, "crash");
  EXPECT_EQ(row.node, "node-b");
  EXPECT_EQ(row.rank, std::optional<uint32_t>(2));
  EXPECT_TRUE(row.charged);
  EXPECT_EQ(row.time, now() - absl::Seconds(1));
  EXPECT_EQ(job().costs().failures(), 1);  // counts in the MTBF
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
  EXPECT_EQ(job().lifecycle().reason, "crash on node-b: crash of rank 2");
  EXPECT_EQ(job().lifecycle().stop_deadline, now() + absl::Seconds(30));
  EXPECT_TRUE(job().recovery().active());
  // One charge of three: no quarantine yet.
  EXPECT_FALSE(quarantine_.IsQuarantined("node-b"));
  EXPECT_TRUE(OfKind(out.events, EventKind::kQuarantine).empty());
}

TEST_F(FailureHandlerTest, ThirdChargeQuarantinesFencesAndRestartsTheJobWithoutTheNode) {
  RunJob();
  for (int i = 0; i < 2; ++i) {
    failures_.OnNodeFailure(now(), job(), FailureOn("straggler", "node-b", true));
    clock_.Advance(absl::Minutes(1));
  }
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);  // a straggler restarts nothing
  EXPECT_TRUE(decisions_.Take().fences.empty());

  failures_.OnNodeFailure(now(), job(), FailureOn("straggler", "node-b", true));

  SupervisorOutput out = decisions_.Take();
  EXPECT_TRUE(quarantine_.IsQuarantined("node-b"));
  const std::vector<Event> quarantined = OfKind(out.events, EventKind::kQuarantine);
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_EQ(quarantined[0].node, "node-b");
  EXPECT_THAT(Figure(quarantined[0], "failures"), Optional(3.0));
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-b");
  EXPECT_EQ(out.fences[0].action, FenceAction::kFence);
  ASSERT_EQ(out.journal.nodes.size(), 1u);
  EXPECT_TRUE(out.journal.nodes[0].quarantined);
  EXPECT_EQ(out.journal.nodes[0].changed_by, "policy");
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
  EXPECT_EQ(job().lifecycle().reason, "node node-b quarantined");
}

TEST_F(FailureHandlerTest, UnchargedFailureRestartsButCountsAgainstNoNode) {
  RunJob();
  for (int i = 0; i < 3; ++i) {
    failures_.OnNodeFailure(now(), job(), FailureOn("crash", "node-b", /*charged=*/false));
  }
  EXPECT_FALSE(quarantine_.IsQuarantined("node-b"));
  const SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.journal.failures.size(), 3u);
  EXPECT_FALSE(out.journal.failures[0].charged);
}

class ObserveOnlyTest : public FailureHandlerTest {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o = CorePartsOptions();
    o.observe_only = true;
    return o;
  }
  ObserveOnlyTest() : FailureHandlerTest(Options()) {}
};

TEST_F(ObserveOnlyTest, FailuresAreRecordedAndNothingIsDone) {
  RunJob();
  for (int i = 0; i < 3; ++i) {
    failures_.OnJobFailure(now(), job(), FailureOn("crash", "node-b", true));
  }
  const SupervisorOutput out = decisions_.Take();
  EXPECT_EQ(out.journal.failures.size(), 3u);
  EXPECT_EQ(job().costs().failures(), 3);
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
  EXPECT_FALSE(quarantine_.IsQuarantined("node-b"));
  EXPECT_TRUE(out.fences.empty());
}

TEST_F(FailureHandlerTest, TransientVerdictRestartsAsItIsAndChargesNoNode) {
  RunJob();
  failures_.OnJobFailure(now(), job(), WithVerdict(VerdictAction::kTransient));

  SupervisorOutput out = decisions_.Take();
  const std::vector<Event> verdicts = OfKind(out.events, EventKind::kVerdict);
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_EQ(verdicts[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(verdicts[0].node, "node-b");
  EXPECT_THAT(Figure(verdicts[0], "action"),
              Optional(static_cast<double>(VerdictAction::kTransient)));
  EXPECT_THAT(Figure(verdicts[0], "acted"), Optional(1.0));
  EXPECT_THAT(Figure(verdicts[0], "exit_code"), Optional(16.0));
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
  EXPECT_FALSE(job().lifecycle().hold_after_stop.has_value());
  EXPECT_EQ(failures_.verdicts().Get(VerdictAction::kTransient, Verdict::Source::kExitCode), 1u);
}

TEST_F(FailureHandlerTest, StopVerdictHoldsTheJobOnceStopped) {
  RunJob();
  failures_.OnJobFailure(now(), job(), WithVerdict(VerdictAction::kStop));

  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
  EXPECT_TRUE(job().lifecycle().hold_after_stop.has_value());
  EXPECT_FALSE(job().recovery().active());  // no recovery to time: it is not restarted
}

TEST_F(FailureHandlerTest, RestartElsewhereLeavesTheNodeOutThenQuarantinesItTheSecondTime) {
  RunJob();
  failures_.OnJobFailure(now(), job(), WithVerdict(VerdictAction::kRestartElsewhere));

  SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(OfKind(out.events, EventKind::kVerdict).size(), 1u);
  EXPECT_THAT(Figure(OfKind(out.events, EventKind::kVerdict)[0], "on_node"), Optional(1.0));
  EXPECT_EQ(job().lifecycle().leave_out_next, "node-b");
  EXPECT_FALSE(quarantine_.IsQuarantined("node-b"));

  clock_.Advance(absl::Minutes(5));
  failures_.OnJobFailure(now(), job(), WithVerdict(VerdictAction::kRestartElsewhere));

  out = decisions_.Take();
  EXPECT_TRUE(quarantine_.IsQuarantined("node-b"));
  EXPECT_EQ(OfKind(out.events, EventKind::kQuarantine).size(), 1u);
  EXPECT_THAT(Figure(OfKind(out.events, EventKind::kVerdict)[0], "quarantined"), Optional(1.0));
}

TEST_F(FailureHandlerTest, OperatorQuarantineIsIdempotentAndSaysWhy) {
  RunJob();
  EXPECT_EQ(failures_.Quarantine(now(), "node-z", "bad disk", false).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(failures_.Quarantine(now(), "node-a", "", false).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<std::string> done = failures_.Quarantine(now(), "node-a", "bad disk", false);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(*done, "node node-a quarantined");
  SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.journal.nodes.size(), 1u);
  EXPECT_EQ(out.journal.nodes[0].changed_by, "operator");
  EXPECT_EQ(out.journal.nodes[0].reason, "bad disk");
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);  // its job goes on without it

  EXPECT_THAT(failures_.Quarantine(now(), "node-a", "again", false).value(),
              HasSubstr("already quarantined: bad disk"));
  EXPECT_TRUE(decisions_.Take().fences.empty());
}

// At most a quarter of the nodes quarantined (of two: one).
class FractionCapTest : public FailureHandlerTest {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o = CorePartsOptions();
    o.quarantine.max_fraction = 0.25;
    return o;
  }
  FractionCapTest() : FailureHandlerTest(Options()) {}
};

TEST_F(FractionCapTest, OperatorQuarantineObeysTheCapUnlessForced) {
  RunJob();
  ASSERT_TRUE(failures_.Quarantine(now(), "node-a", "bad disk", false).ok());

  const absl::StatusOr<std::string> refused =
      failures_.Quarantine(now(), "node-b", "bad nic", false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("force it"));
  EXPECT_FALSE(quarantine_.IsQuarantined("node-b"));

  EXPECT_TRUE(failures_.Quarantine(now(), "node-b", "bad nic", /*force=*/true).ok());
  EXPECT_TRUE(quarantine_.IsQuarantined("node-b"));
}

TEST_F(FailureHandlerTest, UnquarantineForgetsThePendingFence) {
  RunJob();
  ASSERT_TRUE(failures_.Quarantine(now(), "node-a", "bad disk", false).ok());
  decisions_.Take();

  absl::StatusOr<std::string> lifted = failures_.Unquarantine(now(), "node-a");
  ASSERT_TRUE(lifted.ok());
  EXPECT_EQ(*lifted, "node node-a unquarantined");
  EXPECT_FALSE(quarantine_.IsQuarantined("node-a"));
  SupervisorOutput out = decisions_.Take();
  EXPECT_EQ(OfKind(out.events, EventKind::kUnquarantine).size(), 1u);
  EXPECT_TRUE(out.fences.empty());  // no --unfence-command: nothing to run
  ASSERT_EQ(out.journal.fences.size(), 1u);
  EXPECT_FALSE(out.journal.fences[0].pending);  // the fence still pending is cleared
  EXPECT_EQ(*failures_.Unquarantine(now(), "node-a"), "node node-a already not quarantined");
}

}  // namespace
}  // namespace trainsup
