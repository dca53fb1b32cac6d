// A command that fails before any rank reports: when it is one, what it
// said, and whose it is (the workload's everywhere or again, the node's for
// an infrastructure fault on it alone, undecided the first time).
#include "daemon/core/early_failure.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainsup::testing::MakeHeartbeat;

constexpr NodeIndex kNodeA = 0;
constexpr NodeIndex kNodeB = 1;
const absl::Time kNow = absl::FromUnixSeconds(1000);

LauncherInfo Failed(std::vector<std::string> lines, int exit_code = 1, int signal = 0) {
  LauncherInfo l;
  l.state = LauncherState::kExited;
  l.exit_code = exit_code;
  l.signal = signal;
  l.stderr_lines = std::move(lines);
  return l;
}

const std::vector<std::string> kNoHelper = {
    "[default1]:Traceback (most recent call last):",
    "[default1]:  File \"/job/train.py\", line 23, in <module>",
    "[default1]:    import trainsup",
    "[default1]:ModuleNotFoundError: No module named 'trainsup'",
};

class EarlyFailureTest : public ::testing::Test {
 protected:
  EarlyFailure On(NodeIndex node, const LauncherInfo& launcher) {
    std::optional<EarlyFailure> f = EarlyFailureOf(job_, node, launcher);
    EXPECT_TRUE(f.has_value());
    return f.value_or(EarlyFailure());
  }

  Job job_{"job", 8, 8};
};

TEST_F(EarlyFailureTest, ACommandThatFailedBeforeItsRanksReportedSaysWhy) {
  const EarlyFailure f = On(kNodeB, Failed(kNoHelper));
  EXPECT_EQ(f.node, kNodeB);
  EXPECT_EQ(f.lines, kNoHelper);
  EXPECT_EQ(f.cause, "ModuleNotFoundError: No module named 'trainsup'");
  EXPECT_EQ(f.signature, "ModuleNotFoundError: No module named 'trainsup'");
  EXPECT_FALSE(f.infrastructure);
  EXPECT_FALSE(f.crash_signal);
}

TEST_F(EarlyFailureTest, ItsSignatureBlanksNumbersAndWithoutOutputIsItsExitStatus) {
  EXPECT_EQ(On(kNodeA, Failed({"[default0]:RuntimeError: CUDA error: unknown error (pid 4211)"}))
                .signature,
            "RuntimeError: CUDA error: unknown error (pid N)");
  const EarlyFailure silent = On(kNodeA, Failed({}, 0, 9));
  EXPECT_EQ(silent.cause, "");
  EXPECT_EQ(silent.signature, "killed (SIGKILL: out of memory?)");
  EXPECT_TRUE(silent.crash_signal);
}

TEST_F(EarlyFailureTest, NotEarlyOnceARankOfTheNodeReported) {
  job_.Apply(kNow, kNodeB, MakeHeartbeat(HeartbeatKind::kStart, 2, 0));
  EXPECT_EQ(EarlyFailureOf(job_, kNodeB, Failed(kNoHelper)), std::nullopt);
  // The other node's ranks said nothing: its failure is early.
  EXPECT_TRUE(EarlyFailureOf(job_, kNodeA, Failed(kNoHelper)).has_value());
  // A command that did not fail is no failure.
  LauncherInfo ok = Failed({}, 0);
  EXPECT_EQ(EarlyFailureOf(job_, kNodeA, ok), std::nullopt);
}

TEST_F(EarlyFailureTest, TheSameOnEveryNodeIsTheWorkloadsAndTheReasonQuotesTheLines) {
  const EarlyFailure a = On(kNodeA, Failed(kNoHelper));
  const EarlyFailure b = On(kNodeB, Failed(kNoHelper));
  const EarlyJudgement j = JudgeEarlyFailure(1, a, {a, b}, {"node-a", "node-b"}, 2, std::nullopt);
  EXPECT_EQ(j.kind, EarlyJudgement::Kind::kWorkload);
  EXPECT_EQ(j.reason,
            "the command failed before any rank reported, the same way on all 2 nodes (node-a, "
            "node-b): the workload's failure, not a node's; its last stderr lines: Traceback "
            "(most recent call last): | File \"/job/train.py\", line 23, in <module> | import "
            "trainsup | ModuleNotFoundError: No module named 'trainsup'");
}

TEST_F(EarlyFailureTest, TheSameAgainInALaterGenerationIsTheWorkloads) {
  const EarlyFailure b = On(kNodeB, Failed(kNoHelper));
  const EarlyJudgement j =
      JudgeEarlyFailure(3, b, {b}, {"node-b"}, 2, EarlyFailureMemory{2, b.signature});
  EXPECT_EQ(j.kind, EarlyJudgement::Kind::kWorkload);
  EXPECT_THAT(j.reason, HasSubstr("the same way in generations 2 and 3"));
  EXPECT_THAT(j.reason, HasSubstr("ModuleNotFoundError: No module named 'trainsup'"));
}

// Negative controls: nothing is held before it repeats or is seen on every
// node, and a node's own fault stays the node's.

TEST_F(EarlyFailureTest, AFirstFailureOnOneNodeIsNotHeld) {
  const EarlyFailure b = On(kNodeB, Failed(kNoHelper));
  // node-a still runs (it waits for node-b's ranks in the rendezvous).
  EXPECT_EQ(JudgeEarlyFailure(1, b, {b}, {"node-b"}, 2, std::nullopt).kind,
            EarlyJudgement::Kind::kFirst);
  // A different failure before is no repeat; nor is this generation's own.
  EXPECT_EQ(JudgeEarlyFailure(2, b, {b}, {"node-b"}, 2, EarlyFailureMemory{1, "other"}).kind,
            EarlyJudgement::Kind::kFirst);
  EXPECT_EQ(JudgeEarlyFailure(2, b, {b}, {"node-b"}, 2, EarlyFailureMemory{2, b.signature}).kind,
            EarlyJudgement::Kind::kFirst);
  // One node that is all the job has: not yet "every node".
  EXPECT_EQ(JudgeEarlyFailure(1, b, {b}, {"node-b"}, 1, std::nullopt).kind,
            EarlyJudgement::Kind::kFirst);
}

TEST_F(EarlyFailureTest, DifferentFailuresOnEveryNodeAreNotOneWorkloadFailure) {
  const EarlyFailure a = On(kNodeA, Failed({"[default0]:FileNotFoundError: /data/shard-0"}));
  const EarlyFailure b = On(kNodeB, Failed(kNoHelper));
  EXPECT_EQ(JudgeEarlyFailure(1, b, {a, b}, {"node-a", "node-b"}, 2, std::nullopt).kind,
            EarlyJudgement::Kind::kFirst);
}

TEST_F(EarlyFailureTest, AnInfrastructureFaultOnOneNodeIsTheNodesEvenWhenItRepeats) {
  const EarlyFailure b =
      On(kNodeB, Failed({"[default0]:RuntimeError: CUDA error: unspecified launch failure"}));
  EXPECT_TRUE(b.infrastructure);
  EXPECT_EQ(JudgeEarlyFailure(1, b, {b}, {"node-b"}, 2, std::nullopt).kind,
            EarlyJudgement::Kind::kNode);
  EXPECT_EQ(JudgeEarlyFailure(2, b, {b}, {"node-b"}, 2, EarlyFailureMemory{1, b.signature}).kind,
            EarlyJudgement::Kind::kNode);
  // A command killed by a crash signal on one node, too.
  const EarlyFailure killed = On(kNodeB, Failed({}, 0, 9));
  EXPECT_EQ(JudgeEarlyFailure(1, killed, {killed}, {"node-b"}, 2, std::nullopt).kind,
            EarlyJudgement::Kind::kNode);
}

TEST_F(EarlyFailureTest, TheSameInfrastructureFaultOnEveryNodeIsNoOneNodes) {
  const LauncherInfo driver = Failed({"RuntimeError: CUDA error: unknown error"});
  const EarlyFailure a = On(kNodeA, driver);
  const EarlyFailure b = On(kNodeB, driver);
  EXPECT_EQ(JudgeEarlyFailure(1, a, {a, b}, {"node-a", "node-b"}, 2, std::nullopt).kind,
            EarlyJudgement::Kind::kWorkload);
}

TEST_F(EarlyFailureTest, ItKeepsAtMostTheLastLinesEachCut) {
  std::vector<std::string> many;
  for (int i = 0; i < 20; ++i) many.push_back("line " + std::to_string(i));
  many.push_back("ValueError: " + std::string(400, 'v'));
  const EarlyFailure f = On(kNodeA, Failed(many));
  EXPECT_EQ(f.lines.size(), 8u);
  EXPECT_EQ(f.lines.front(), "line 13");
  EXPECT_EQ(f.lines.back().size(), 256u);
}

}  // namespace
}  // namespace trainsup
