// trainsupctl top's screen: a pure function of what was read and the
// terminal's size.
#include "cli/top.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

v1::Rank MakeRank(uint32_t rank, double compute_p99) {
  v1::Rank r;
  r.set_rank(rank);
  r.set_node(rank < 4 ? "node-a" : "node-b");
  r.set_step(120);
  r.set_phase("computing");
  r.set_compute_p99_seconds(compute_p99);
  r.set_step_p99_seconds(0.5);
  r.set_last_heartbeat_age_seconds(0.2);
  r.set_liveness("alive");
  return r;
}

// A running job of `world` ranks whose answer holds `rows` of them, slowest
// first, as the supervisor sorts them.
TopData RunningJob(int world, int rows) {
  TopData data;
  data.job_id = "demo";
  v1::Job* job = data.detail.emplace().mutable_job();
  job->set_job_id("demo");
  job->set_state("running");
  job->set_generation(3);
  job->set_step(120);
  (*job->mutable_signals())["loss_shifted"] = 0;
  (*job->mutable_signals())["loss_flat"] = 1;
  v1::LedgerBuckets* ledger = data.detail->mutable_ledger();
  ledger->set_wall_seconds(100);
  ledger->set_goodput_fraction(0.875);
  *job->mutable_last_progress_time() =
      google::protobuf::util::TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kNow) - 3);
  data.steps_per_second = 4.25;
  v1::ListRanksResponse& ranks = data.ranks.emplace();
  ranks.set_job_id("demo");
  ranks.set_world_size(world);
  ranks.set_matched(world);
  ranks.mutable_summary()->set_ranks(world);
  ranks.mutable_summary()->set_alive(world);
  for (int i = 0; i < rows; ++i) *ranks.add_ranks() = MakeRank(world - 1 - i, 1.0 - 0.01 * i);
  v1::Event& event = data.last_event.emplace();
  event.set_id(7);
  event.set_kind("straggler");
  event.set_job_id("demo");
  event.set_generation(3);
  event.set_rank(world - 1);
  event.set_message("rank is slow");
  data.read_at = kNow - absl::Seconds(1);
  return data;
}

TEST(TopRankRows, IsWhatFitsBelowTheHeader) {
  EXPECT_EQ(TopRankRows({30, 120}), 30 - kTopHeaderLines);
  EXPECT_EQ(TopRankRows({kTopHeaderLines, 80}), 0);
  EXPECT_EQ(TopRankRows({2, 80}), 0);
}

TEST(RenderTopScreen, HeaderSaysStateGenerationStepRateGoodputAndLastEvent) {
  const std::vector<std::string> lines = RenderTopScreen(RunningJob(8, 3), {30, 200}, kNow);
  ASSERT_THAT(lines, SizeIs(kTopHeaderLines + 3));
  EXPECT_THAT(lines[0], AllOf(HasSubstr("job demo"), HasSubstr("running"),
                              HasSubstr("generation 3"), HasSubstr("step 120"),
                              HasSubstr("4.25 steps/s"), HasSubstr("goodput 87.5%")));
  EXPECT_THAT(lines[1], HasSubstr("ranks 8/8 heard"));
  EXPECT_EQ(lines[2], "signals: loss_flat 1");  // what is not 0: loss_shifted is left out
  EXPECT_THAT(lines[3], AllOf(HasSubstr("last event:"), HasSubstr("straggler demo#3 rank 7"),
                              HasSubstr("rank is slow")));
  EXPECT_THAT(lines[4], HasSubstr("the 3 slowest of 8 ranks by compute p99"));
  EXPECT_THAT(lines[5], ContainsRegex("^RANK +NODE +PID +STEP +PHASE +COMPUTE_P99 .*FLAGS"));
}

TEST(RenderTopScreen, TheSignalsLineLeavesOutTheZerosOfAHealthyJob) {
  TopData data = RunningJob(8, 3);
  v1::Job* job = data.detail->mutable_job();
  (*job->mutable_signals())["loss_flat"] = 0;
  EXPECT_EQ(RenderTopScreen(data, {30, 200}, kNow)[2], "signals: all 0");
  (*job->mutable_signals())["checkpoint_age_steps"] = 340;
  (*job->mutable_signals())["checkpoint_planned_steps"] = 500;
  EXPECT_EQ(RenderTopScreen(data, {30, 200}, kNow)[2],
            "signals: checkpoint_age_steps 340, checkpoint_planned_steps 500");
}

TEST(RenderTopScreen, RanksKeepTheSupervisorsOrderSlowestFirst) {
  const std::vector<std::string> lines = RenderTopScreen(RunningJob(8, 3), {30, 200}, kNow);
  EXPECT_THAT(lines[6], ContainsRegex("^7 +node-b +0 +120 +computing +1\\.00s"));
  EXPECT_THAT(lines[7], ContainsRegex("^6 +node-b +0 +120 +computing +990ms"));
  EXPECT_THAT(lines[8], ContainsRegex("^5 +node-b +0 +120 +computing +980ms"));
}

TEST(RenderTopScreen, FitsTheTerminalHowEverSmall) {
  const TopData data = RunningJob(100000, 24);  // read for a 30-row terminal
  for (TerminalSize size : {TerminalSize{30, 120}, TerminalSize{12, 40}, TerminalSize{3, 10},
                            TerminalSize{0, 0}}) {
    SCOPED_TRACE(testing::Message() << size.rows << "x" << size.cols);
    const std::vector<std::string> lines = RenderTopScreen(data, size, kNow);
    EXPECT_LE(static_cast<int>(lines.size()), size.rows);
    for (const std::string& line : lines) EXPECT_LE(static_cast<int>(line.size()), size.cols);
  }
  // A smaller terminal shows fewer of the rows already read.
  EXPECT_THAT(RenderTopScreen(data, {12, 120}, kNow), SizeIs(12));
  EXPECT_THAT(RenderTopScreen(data, {12, 120}, kNow)[4],
              HasSubstr("the 6 slowest of 100000 ranks"));
}

TEST(RenderTopScreen, FlagsStragglersCulpritsAndTheDead) {
  TopData data = RunningJob(8, 4);
  v1::ListRanksResponse& ranks = *data.ranks;
  ranks.mutable_ranks(0)->set_stall_culprit(true);
  ranks.mutable_ranks(1)->set_straggler(true);
  ranks.mutable_ranks(2)->set_crash_culprit(true);
  ranks.mutable_ranks(2)->set_liveness("dead");
  ranks.mutable_ranks(2)->set_exit("exit code 1");
  ranks.mutable_ranks(3)->set_liveness("finished");
  ranks.mutable_ranks(3)->set_exit("exit code 0");
  const std::vector<std::string> lines = RenderTopScreen(data, {30, 200}, kNow);
  EXPECT_THAT(lines[6], ContainsRegex("STALL-CULPRIT$"));
  EXPECT_THAT(lines[7], ContainsRegex("STRAGGLER$"));
  EXPECT_THAT(lines[8], ContainsRegex("dead +- +CRASHED-FIRST,exit code 1$"));
  EXPECT_THAT(lines[9], ContainsRegex("finished +-$"));
}

TEST(RenderTopScreen, UnreachableSupervisorKeepsTheLastAnswersAndSaysSo) {
  TopData data = RunningJob(8, 2);
  data.error = absl::UnavailableError("cannot reach the supervisor at 127.0.0.1:7411: refused");
  data.read_at = kNow - absl::Seconds(12);
  const std::vector<std::string> lines = RenderTopScreen(data, {30, 200}, kNow);
  EXPECT_THAT(lines[4], HasSubstr("supervisor unreachable (showing its answers of 12.00s "
                                  "ago): cannot reach the supervisor"));
  EXPECT_THAT(lines, SizeIs(kTopHeaderLines + 2));
}

TEST(RenderTopScreen, BeforeAnyAnswer) {
  TopData data;
  data.job_id = "j1";
  data.error = absl::UnavailableError("connection refused");
  const std::vector<std::string> lines = RenderTopScreen(data, {10, 80}, kNow);
  EXPECT_THAT(lines[0], HasSubstr("job j1   (waiting for the supervisor)"));
  EXPECT_THAT(lines[4], HasSubstr("supervisor unreachable: connection refused"));
  EXPECT_THAT(lines[3], HasSubstr("last event: none"));
  EXPECT_EQ(lines[2], "signals: -");
}

TEST(RenderTopScreen, HeaderSaysTheLastStepsAge) {
  TopData data = RunningJob(8, 3);
  // A hang: the answers are fresh, the last step is not.
  data.read_at = kNow;
  const std::vector<std::string> lines = RenderTopScreen(data, {30, 200}, kNow);
  EXPECT_THAT(lines[0], HasSubstr("last step 3.00s ago"));
}

TEST(RenderTopScreen, WaitsForTheJobAndForAJob) {
  TopData data;
  data.job_id = "later";
  data.error = absl::NotFoundError("no job later");
  EXPECT_THAT(RenderTopScreen(data, {10, 120}, kNow)[0],
              HasSubstr("job later   (waiting for the job: the supervisor does not know it yet)"));
  data.job_id = "";
  data.error = absl::NotFoundError("the supervisor knows no job yet");
  EXPECT_THAT(RenderTopScreen(data, {10, 120}, kNow)[0],
              HasSubstr("job -   (waiting for a job: the supervisor knows none yet)"));
}

TEST(RenderTopScreen, ANarrowTerminalLosesTheLeastImportantColumnsFirst) {
  TopData data = RunningJob(8, 3);
  data.ranks->mutable_ranks(0)->set_straggler(true);
  const std::vector<std::string> wide = RenderTopScreen(data, {30, 200}, kNow);
  EXPECT_THAT(wide[5], AllOf(HasSubstr("LOSS"), HasSubstr("PID"), HasSubstr("FLAGS")));
  const std::vector<std::string> narrow = RenderTopScreen(data, {30, 60}, kNow);
  EXPECT_THAT(narrow[5], AllOf(HasSubstr("RANK"), HasSubstr("COMPUTE_P99"), HasSubstr("FLAGS"),
                               Not(HasSubstr("LOSS")), Not(HasSubstr("PID"))));
  EXPECT_THAT(narrow[6], ContainsRegex("STRAGGLER$"));
  for (const std::string& line : narrow) EXPECT_LE(line.size(), 60u);
}

TEST(FitLine, CutsOnCharactersAndBlanksControls) {
  EXPECT_EQ(FitLine("abcdef", 4), "abcd");
  EXPECT_EQ(FitLine("a\tb\nc", 10), "a b c");
  EXPECT_EQ(FitLine("h\xC3\xA9llo", 2), "h\xC3\xA9");  // "hé": 2 characters, 3 bytes
  EXPECT_EQ(FitLine("abc", 0), "");
}

TEST(StepRate, MeasuresTheAdvanceOverTheWindow) {
  StepRate rate(absl::Seconds(10));
  EXPECT_EQ(rate.PerSecond(), std::nullopt);
  rate.Add(1, 100, kNow);
  EXPECT_EQ(rate.PerSecond(), std::nullopt);
  rate.Add(1, 104, kNow + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(*rate.PerSecond(), 4.0);
  rate.Add(1, 110, kNow + absl::Seconds(2));
  EXPECT_DOUBLE_EQ(*rate.PerSecond(), 5.0);
  // A stalled job: the rate falls as the window moves past the last steps.
  for (int s = 3; s <= 20; ++s) rate.Add(1, 110, kNow + absl::Seconds(s));
  EXPECT_DOUBLE_EQ(*rate.PerSecond(), 0.0);
}

TEST(StepRate, StartsOverWithANewGenerationOrAStepBackwards) {
  StepRate rate;
  rate.Add(1, 500, kNow);
  rate.Add(1, 510, kNow + absl::Seconds(1));
  rate.Add(2, 400, kNow + absl::Seconds(2));  // resumed from a checkpoint
  EXPECT_EQ(rate.PerSecond(), std::nullopt);
  rate.Add(2, 402, kNow + absl::Seconds(3));
  EXPECT_DOUBLE_EQ(*rate.PerSecond(), 2.0);
  rate.Add(2, -1, kNow + absl::Seconds(4));  // none yet: nothing to measure from
  EXPECT_EQ(rate.PerSecond(), std::nullopt);
}

TEST(StepsPerSecondOfStepTimes, IsTheInverseOfTheStepTimeWhileTheJobSteps) {
  v1::Job job;
  job.set_state("running");
  EXPECT_EQ(StepsPerSecondOfStepTimes(job), std::nullopt);  // no step time yet
  job.set_step_p50_seconds(0.25);
  job.set_step_p99_seconds(0.4);
  EXPECT_DOUBLE_EQ(*StepsPerSecondOfStepTimes(job), 4.0);
  job.set_stalled(true);
  EXPECT_EQ(StepsPerSecondOfStepTimes(job), std::nullopt);
  job.set_stalled(false);
  for (const char* state : {"held", "finished", "restarting", "pending"}) {
    job.set_state(state);
    EXPECT_EQ(StepsPerSecondOfStepTimes(job), std::nullopt) << state;
  }
}

TEST(StepRate, NeedsHalfASecondBetweenSamples) {
  StepRate rate;
  rate.Add(1, 10, kNow);
  rate.Add(1, 11, kNow + absl::Milliseconds(100));
  EXPECT_EQ(rate.PerSecond(), std::nullopt);
}

}  // namespace
}  // namespace trainsup
