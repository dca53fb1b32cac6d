#include "daemon/core/validation.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/signals/signal_options.h"
#include "gtest/gtest.h"
#include "tests/unit/reject_reason_printer.h"

namespace trainsup {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A heartbeat that passes every check.
Heartbeat GoodHeartbeat() {
  Heartbeat hb;
  hb.kind = HeartbeatKind::kStep;
  hb.job = "job-1";
  hb.rank = 3;
  hb.local_rank = 1;
  hb.world_size = 8;
  hb.pid = 4242;
  hb.step = 10;
  hb.step_duration_s = 0.5;
  hb.data_wait_s = 0.01;
  hb.compute_s = 0.3;
  hb.checkpoint_blocking_s = 0;
  hb.checkpoint_async_s = 0;
  return hb;
}

// --- IsValidName ---

TEST(IsValidNameTest, RejectsEmpty) { EXPECT_FALSE(IsValidName("")); }

TEST(IsValidNameTest, AcceptsUpToMaxLength) {
  EXPECT_TRUE(IsValidName("a"));
  EXPECT_TRUE(IsValidName(std::string(kMaxNameLength, 'a')));
  EXPECT_FALSE(IsValidName(std::string(kMaxNameLength + 1, 'a')));
  EXPECT_EQ(kMaxNameLength, 128u);
}

TEST(IsValidNameTest, AcceptsLettersDigitsAndDotUnderscoreDash) {
  EXPECT_TRUE(IsValidName("Node-01.example_com"));
  EXPECT_TRUE(IsValidName("."));
  EXPECT_TRUE(IsValidName("_"));
  EXPECT_TRUE(IsValidName("ABCxyz0123456789"));
}

TEST(IsValidNameTest, RejectsForbiddenCharacters) {
  EXPECT_FALSE(IsValidName("job 1"));
  EXPECT_FALSE(IsValidName("job/1"));
  EXPECT_FALSE(IsValidName("job:1"));
  EXPECT_FALSE(IsValidName("job\n"));
  EXPECT_FALSE(IsValidName(std::string("job\0x", 5)));
  EXPECT_FALSE(IsValidName("jöb"));      // UTF-8, non-ASCII
  EXPECT_FALSE(IsValidName("\xE2\x82\xAC"));  // the euro sign
}

// --- CheckHeartbeat ---

TEST(CheckHeartbeatTest, AcceptsAGoodHeartbeat) {
  EXPECT_EQ(CheckHeartbeat(GoodHeartbeat(), "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, AcceptsEveryKnownKind) {
  for (HeartbeatKind kind :
       {HeartbeatKind::kStep, HeartbeatKind::kComputeBegin, HeartbeatKind::kComputeEnd,
        HeartbeatKind::kCheckpointBegin, HeartbeatKind::kCheckpointEnd, HeartbeatKind::kException,
        HeartbeatKind::kStart, HeartbeatKind::kExit}) {
    Heartbeat hb = GoodHeartbeat();
    hb.kind = kind;
    EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt) << static_cast<int>(kind);
  }
}

TEST(CheckHeartbeatTest, AVerdictNeedsAKnownActionAndAReasonOfAtMost512Bytes) {
  Heartbeat hb = GoodHeartbeat();
  hb.kind = HeartbeatKind::kVerdict;
  hb.verdict = VerdictAction::kRestartElsewhere;
  hb.verdict_reason = std::string(512, 'r');
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
  hb.verdict_reason += "r";
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kTooLong);
  hb.verdict_reason = "";
  hb.verdict = VerdictAction::kUnspecified;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadVerdict);
}

TEST(BoundLauncherTest, KeepsTheLastLinesOnOneLineEachCut) {
  LauncherInfo launcher;
  for (int i = 0; i < 12; ++i) launcher.stderr_lines.push_back("line " + std::to_string(i));
  launcher.stderr_lines.push_back(std::string(600, 'x') + "\x1b[0m");
  BoundLauncher(launcher);
  ASSERT_EQ(launcher.stderr_lines.size(), 8u);
  EXPECT_EQ(launcher.stderr_lines.front(), "line 5");
  EXPECT_EQ(launcher.stderr_lines.back().size(), 256u);
}

TEST(CheckHeartbeatTest, UnspecifiedKindIsBadKind) {
  Heartbeat hb = GoodHeartbeat();
  hb.kind = HeartbeatKind::kUnspecified;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadKind);
}

TEST(CheckHeartbeatTest, OutOfRangeKindIsBadKind) {
  Heartbeat hb = GoodHeartbeat();
  hb.kind = static_cast<HeartbeatKind>(99);
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadKind);
}

TEST(CheckHeartbeatTest, InvalidJobIsBadJob) {
  for (const std::string& job : {std::string("job 1"), std::string(129, 'j')}) {
    Heartbeat hb = GoodHeartbeat();
    hb.job = job;
    EXPECT_EQ(CheckHeartbeat(hb, job), RejectReason::kBadJob) << "job='" << job << "'";
  }
}

TEST(CheckHeartbeatTest, AnEmptyJobIsTheAgentsOwn) {
  Heartbeat hb = GoodHeartbeat();
  hb.job.clear();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, OtherJobThanTheAgentsIsJobMismatch) {
  EXPECT_EQ(CheckHeartbeat(GoodHeartbeat(), "job-2"), RejectReason::kJobMismatch);
}

TEST(CheckHeartbeatTest, ZeroWorldSizeIsBadWorldSize) {
  Heartbeat hb = GoodHeartbeat();
  hb.world_size = 0;
  hb.rank = 0;
  hb.local_rank = 0;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadWorldSize);
}

TEST(CheckHeartbeatTest, WorldSizeAboveMaximumIsBadWorldSize) {
  Heartbeat hb = GoodHeartbeat();
  hb.world_size = kMaxWorldSize + 1;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadWorldSize);

  hb.world_size = kMaxWorldSize;
  hb.rank = kMaxWorldSize - 1;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, RankEqualToWorldSizeIsOutOfRange) {
  Heartbeat hb = GoodHeartbeat();
  hb.rank = hb.world_size;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kRankOutOfRange);

  hb.rank = hb.world_size - 1;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, LocalRankEqualToWorldSizeIsOutOfRange) {
  Heartbeat hb = GoodHeartbeat();
  hb.local_rank = hb.world_size;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kRankOutOfRange);
}

TEST(CheckHeartbeatTest, NegativeStepIsNegativeStep) {
  Heartbeat hb = GoodHeartbeat();
  hb.step = -1;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kNegativeStep);

  hb.step = 0;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

// Found by fuzz/agent_intake_fuzzer: a step near INT64_MAX was accepted, and
// the straggler detector's step + window overflowed (undefined).
TEST(CheckHeartbeatTest, StepBeyondTwoToThe53IsOutOfRange) {
  Heartbeat hb = GoodHeartbeat();
  hb.step = std::numeric_limits<int64_t>::max() - 7;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kNegativeStep);
  hb.step = (int64_t{1} << 53) + 1;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kNegativeStep);

  hb.step = int64_t{1} << 53;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

class BadDurationTest : public ::testing::TestWithParam<double> {};

TEST_P(BadDurationTest, StepDuration) {
  Heartbeat hb = GoodHeartbeat();
  hb.step_duration_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

TEST_P(BadDurationTest, DataWait) {
  Heartbeat hb = GoodHeartbeat();
  hb.data_wait_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

TEST_P(BadDurationTest, Compute) {
  Heartbeat hb = GoodHeartbeat();
  hb.compute_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

TEST_P(BadDurationTest, CheckpointBlocking) {
  Heartbeat hb = GoodHeartbeat();
  hb.checkpoint_blocking_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

TEST_P(BadDurationTest, CheckpointAsync) {
  Heartbeat hb = GoodHeartbeat();
  hb.checkpoint_async_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

TEST_P(BadDurationTest, Queued) {
  Heartbeat hb = GoodHeartbeat();
  hb.queued_s = GetParam();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kBadDuration);
}

INSTANTIATE_TEST_SUITE_P(NegativeNaNOrInfinite, BadDurationTest,
                         ::testing::Values(-0.001, kNaN, kInf, -kInf));

TEST(CheckHeartbeatTest, AbsentComputeIsFine) {
  Heartbeat hb = GoodHeartbeat();
  hb.compute_s.reset();
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, ExceptionMessageOverLimitIsTooLong) {
  Heartbeat hb = GoodHeartbeat();
  hb.kind = HeartbeatKind::kException;
  hb.exception_type = "RuntimeError";
  hb.exception_message = std::string(kMaxExceptionMessageLength, 'm');
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);

  hb.exception_message = std::string(1025, 'm');
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kTooLong);
}

TEST(CheckHeartbeatTest, ExceptionTypeOverLimitIsTooLong) {
  Heartbeat hb = GoodHeartbeat();
  hb.exception_type = std::string(kMaxExceptionTypeLength, 't');
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);

  hb.exception_type = std::string(kMaxExceptionTypeLength + 1, 't');
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), RejectReason::kTooLong);
}

// --- Training signals ---

TEST(CheckHeartbeatTest, NonFiniteLossAndGradNormAreSignalsNotErrors) {
  Heartbeat hb = GoodHeartbeat();
  hb.loss = kNaN;
  hb.grad_norm = kInf;
  hb.learning_rate = 3e-4;
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, SignalFieldsWithinTheirRangesPass) {
  Heartbeat hb = GoodHeartbeat();
  hb.host_rss_bytes = uint64_t{1} << 56;
  hb.device_memory_bytes = uint64_t{80} << 30;
  hb.device_memory_capacity_bytes = uint64_t{80} << 30;
  hb.samples = uint64_t{1} << 40;
  hb.tokens = uint64_t{1} << 40;
  hb.replica_digest = ~uint64_t{0};
  hb.replica_group = 7;  // world size 8
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);
}

TEST(CheckHeartbeatTest, SignalFieldsOutOfRangeAreBadSignal) {
  auto check = [](void (*bad)(Heartbeat&)) {
    Heartbeat hb = GoodHeartbeat();
    bad(hb);
    return CheckHeartbeat(hb, "job-1");
  };
  EXPECT_EQ(check([](Heartbeat& hb) { hb.host_rss_bytes = (uint64_t{1} << 56) + 1; }),
            RejectReason::kBadSignal);
  EXPECT_EQ(check([](Heartbeat& hb) { hb.device_memory_bytes = ~uint64_t{0}; }),
            RejectReason::kBadSignal);
  EXPECT_EQ(check([](Heartbeat& hb) { hb.device_memory_capacity_bytes = 0; }),
            RejectReason::kBadSignal);
  EXPECT_EQ(check([](Heartbeat& hb) { hb.samples = (uint64_t{1} << 40) + 1; }),
            RejectReason::kBadSignal);
  EXPECT_EQ(check([](Heartbeat& hb) { hb.tokens = ~uint64_t{0}; }), RejectReason::kBadSignal);
  EXPECT_EQ(check([](Heartbeat& hb) { hb.replica_group = 8; }), RejectReason::kBadSignal);
}

TEST(CheckHeartbeatTest, SignalSettingsOnlyInAStartAndOnlyKnownOnesInRange) {
  Heartbeat hb = GoodHeartbeat();
  hb.kind = HeartbeatKind::kStart;
  hb.signal_settings = {{"loss_flat", 0}, {"loss_shift_sigmas", 8}, {"throughput_confirm", 50}};
  EXPECT_EQ(CheckHeartbeat(hb, "job-1"), std::nullopt);

  Heartbeat step = hb;
  step.kind = HeartbeatKind::kStep;
  EXPECT_EQ(CheckHeartbeat(step, "job-1"), RejectReason::kBadSignal);

  for (const std::pair<std::string, double>& bad :
       std::vector<std::pair<std::string, double>>{{"no_such_rule", 1},
                                                   {"loss_flat", 2},
                                                   {"throughput_confirm", 20.5},
                                                   {"loss_shift_sigmas", kNaN},
                                                   {"loss_shift_sigmas", kInf},
                                                   {"loss_shift_window", 1e9},
                                                   {std::string(65, 'a'), 1}}) {
    Heartbeat start = hb;
    start.signal_settings = {bad};
    EXPECT_EQ(CheckHeartbeat(start, "job-1"), RejectReason::kBadSignal) << bad.first;
  }
  Heartbeat many = hb;
  many.signal_settings.assign(kMaxSignalSettings + 1, {"loss_flat", 1});
  EXPECT_EQ(CheckHeartbeat(many, "job-1"), RejectReason::kBadSignal);
}

// --- RejectReason names and counts ---

TEST(RejectReasonTest, NameRoundTripsForEveryReason) {
  for (int i = 0; i < kRejectReasonCount; ++i) {
    RejectReason reason = static_cast<RejectReason>(i);
    absl::string_view name = RejectReasonName(reason);
    EXPECT_FALSE(name.empty()) << i;
    EXPECT_EQ(RejectReasonFromName(name), reason) << name;
  }
}

TEST(RejectReasonTest, NamesAreDistinct) {
  for (int i = 0; i < kRejectReasonCount; ++i) {
    for (int j = i + 1; j < kRejectReasonCount; ++j) {
      EXPECT_NE(RejectReasonName(static_cast<RejectReason>(i)),
                RejectReasonName(static_cast<RejectReason>(j)));
    }
  }
}

TEST(RejectReasonTest, KnownNames) {
  EXPECT_EQ(RejectReasonName(RejectReason::kInvalidJson), "invalid_json");
  EXPECT_EQ(RejectReasonName(RejectReason::kBadDuration), "bad_duration");
  EXPECT_EQ(RejectReasonName(RejectReason::kWorldSizeMismatch), "world_size_mismatch");
  EXPECT_EQ(RejectReasonName(RejectReason::kOther), "other");
}

TEST(RejectReasonTest, UnknownNameIsOther) {
  EXPECT_EQ(RejectReasonFromName("no_such_reason"), RejectReason::kOther);
  EXPECT_EQ(RejectReasonFromName(""), RejectReason::kOther);
  EXPECT_EQ(RejectReasonFromName("BAD_KIND"), RejectReason::kOther);
}

TEST(RejectCountsTest, StartsAtZero) {
  RejectCounts counts;
  EXPECT_EQ(counts.Total(), 0u);
  for (int i = 0; i < kRejectReasonCount; ++i) {
    EXPECT_EQ(counts.Get(static_cast<RejectReason>(i)), 0u);
  }
}

TEST(RejectCountsTest, AddsByReasonAndTotals) {
  RejectCounts counts;
  counts.Add(RejectReason::kBadKind);
  counts.Add(RejectReason::kBadKind);
  counts.Add(RejectReason::kOversize, 5);

  EXPECT_EQ(counts.Get(RejectReason::kBadKind), 2u);
  EXPECT_EQ(counts.Get(RejectReason::kOversize), 5u);
  EXPECT_EQ(counts.Get(RejectReason::kBadJob), 0u);
  EXPECT_EQ(counts.Total(), 7u);
}

}  // namespace
}  // namespace trainsup
