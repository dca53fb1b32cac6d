// Checkpoint saves (CheckpointSignal): a failed save reported once, and a
// job that trains past twice its planned interval without a committed
// checkpoint. The negative controls come first: no plan yet, a plan just
// shortened, a save that is slow but succeeds, a resume, a hang.
#include "daemon/core/signals/checkpoint_rule.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;
using ::trainsup::testing::At;
using ::trainsup::testing::Figure;
using ::trainsup::testing::PeriodicPlan;

// One job's rule, fed steps of 2 s each and swept after each.
class CheckpointRun {
 public:
  explicit CheckpointRun(CheckpointOverdueOptions options = {}) : rule_(options) {}

  void Plan(CheckpointPlanSpec plan) { plans_.push_back(plan); }

  // Steps [from, to); a checkpoint committed at every step in `commits`.
  void Steps(int64_t from, int64_t to, const std::vector<int64_t>& commits = {}) {
    for (int64_t step = from; step < to; ++step) {
      StepSignals s;
      s.step = step;
      s.step_time_s = 2.0;
      rule_.ObserveStep(s);
      now_ += absl::Seconds(2);
      for (int64_t c : commits) {
        if (c == step) Commit(step);
      }
      Sweep();
    }
  }
  void Commit(int64_t step) {
    CheckpointOutcome c;
    c.step = step;
    c.committed = true;
    rule_.ObserveCheckpoint(c);
  }
  void Fail(int64_t step, uint32_t rank, NodeIndex node, const std::string& error) {
    CheckpointOutcome c;
    c.step = step;
    c.at = {rank, node};
    c.error = error;
    rule_.ObserveCheckpoint(c);
  }
  // Time goes by with no step (a hang, a slow blocking save, a restart).
  void Idle(absl::Duration d) {
    for (absl::Time end = now_ + d; now_ < end; now_ += absl::Seconds(1)) Sweep();
  }
  void Sweep() {
    auto node_name = [this](NodeIndex node) -> const std::string& {
      return node < names_.size() ? names_[node] : none_;
    };
    const SignalSweep sweep{now_, job_, EventJob{"llm", 3}, node_name, false, plans_};
    rule_.Sweep(sweep, found_);
  }

  std::vector<Event> Found(EventKind kind) const {
    std::vector<Event> out;
    for (const SignalFinding& f : found_) {
      if (f.event.kind == kind) out.push_back(f.event);
    }
    return out;
  }
  size_t total() const { return found_.size(); }
  std::vector<std::pair<std::string, double>> Gauges() const {
    std::vector<std::pair<std::string, double>> out;
    rule_.Gauges(out);
    return out;
  }

 private:
  CheckpointSignal rule_;
  std::vector<CheckpointPlanSpec> plans_;
  Job job_{"llm", 16, 16};
  absl::Time now_ = At(absl::ZeroDuration());
  std::vector<SignalFinding> found_;
  const std::vector<std::string> names_ = {"node-a", "node-b"};
  const std::string none_;
};

TEST(CheckpointSignalTest, AJobWithNoPlanYetIsNeverOverdueAndShowsNoGauges) {
  CheckpointRun run;
  run.Steps(1, 2000);
  EXPECT_EQ(run.total(), 0u);
  EXPECT_THAT(run.Gauges(), IsEmpty());
  // Nor with a plan of one-off checkpoints only (no interval).
  CheckpointPlanSpec one_off;
  one_off.plan_id = 1;
  one_off.one_off_steps = {2500};
  run.Plan(one_off);
  run.Steps(2000, 4000);
  EXPECT_EQ(run.total(), 0u);
}

TEST(CheckpointSignalTest, AJobOnItsScheduleIsNeverOverdue) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  std::vector<int64_t> commits;
  for (int64_t s = 100; s < 5000; s += 100) commits.push_back(s);
  run.Steps(1, 5000, commits);
  EXPECT_EQ(run.total(), 0u);
  EXPECT_THAT(run.Gauges(), UnorderedElementsAre(Pair("checkpoint_age_steps", 99),
                                                 Pair("checkpoint_planned_steps", 100),
                                                 Pair("checkpoint_overdue", 0)));
}

TEST(CheckpointSignalTest, APlanJustShortenedIsJudgedFromItsOwnFirstStep) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 1000, 0));
  run.Steps(1, 1500, {1000});
  // The MTBF fell: every 100 steps from 1510. The last checkpoint (1000)
  // is 700 steps behind at 1700, far past 2 x 100, but the new plan has
  // been in force for only 190 steps.
  run.Plan(PeriodicPlan(2, 100, 1510));
  run.Steps(1500, 1701, {1600});
  EXPECT_EQ(run.total(), 0u);
  // It was kept: no alarm. One that is not kept is overdue 200 steps after
  // its last checkpoint (1600), at step 1801.
  run.Steps(1701, 1802);
  ASSERT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 1u);
  EXPECT_THAT(Figure(run.Found(EventKind::kCheckpointOverdue)[0], "since_step"), Optional(1600.0));
}

TEST(CheckpointSignalTest, APlanLengthenedOrRepublishedDoesNotRestartTheStretch) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  // Saves stop after 100. A replan to every 150 from 200 (the job got more
  // reliable) asks for no less than before: the stretch runs from 100, and
  // 2 x 150 later, at 401, the job is overdue, not at 501.
  run.Plan(PeriodicPlan(2, 150, 200));
  run.Steps(1, 401, {100});
  EXPECT_EQ(run.total(), 0u);
  run.Steps(401, 402);
  ASSERT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 1u);
  EXPECT_THAT(Figure(run.Found(EventKind::kCheckpointOverdue)[0], "since_step"), Optional(100.0));
  EXPECT_EQ(ScheduleStart({PeriodicPlan(1, 100, 0), PeriodicPlan(2, 150, 200)},
                          PeriodicPlan(2, 150, 200)),
            0);
  EXPECT_EQ(
      ScheduleStart({PeriodicPlan(1, 100, 0), PeriodicPlan(2, 50, 200)}, PeriodicPlan(2, 50, 200)),
      200);
  EXPECT_EQ(
      ScheduleStart({PeriodicPlan(1, 40, 0), PeriodicPlan(2, 100, 100), PeriodicPlan(3, 50, 200)},
                    PeriodicPlan(3, 50, 200)),
      200);
}

TEST(CheckpointSignalTest, ASlowSaveThatSucceedsAHangAndARestartAreNotOverdue) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  run.Steps(1, 190, {100});
  // A blocking save of 30 minutes: the loop does not step, nothing is lost.
  run.Idle(absl::Minutes(30));
  run.Commit(190);
  run.Steps(190, 250);
  // A hang of an hour at step 249: no step trained, none overdue.
  run.Idle(absl::Hours(1));
  EXPECT_EQ(run.total(), 0u);
  // A new generation resumed from 200: its rule counts from there.
  CheckpointRun resumed;
  resumed.Plan(PeriodicPlan(1, 100, 0));
  resumed.Steps(201, 390, {300});
  EXPECT_EQ(resumed.total(), 0u);
}

TEST(CheckpointSignalTest, TrainingPastTwiceThePlanWithoutACheckpointIsOverdueOnce) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  run.Steps(1, 301, {100});  // 200 steps past 100: at the bound, not past it
  EXPECT_EQ(run.total(), 0u);
  run.Steps(301, 600);
  const std::vector<Event> overdue = run.Found(EventKind::kCheckpointOverdue);
  ASSERT_EQ(overdue.size(), 1u);  // once for the stretch, not every sweep
  const Event& e = overdue[0];
  EXPECT_EQ(e.job, "llm");
  EXPECT_EQ(e.generation, 3u);
  EXPECT_THAT(Figure(e, "step"), Optional(301.0));
  EXPECT_THAT(Figure(e, "since_step"), Optional(100.0));
  EXPECT_THAT(Figure(e, "age_steps"), Optional(201.0));
  EXPECT_THAT(Figure(e, "interval_steps"), Optional(100.0));
  EXPECT_THAT(Figure(e, "limit_steps"), Optional(200.0));
  EXPECT_THAT(Figure(e, "lost_seconds"), Optional(402.0));  // 201 steps of 2 s
  EXPECT_THAT(e.message, HasSubstr("a failure now would lose those 201 steps (6m42s"));
  EXPECT_THAT(run.Gauges(), UnorderedElementsAre(Pair("checkpoint_age_steps", 499),
                                                 Pair("checkpoint_planned_steps", 100),
                                                 Pair("checkpoint_overdue", 1)));
  // A checkpoint ends the stretch; the next one unkept is overdue again.
  run.Steps(600, 700, {600});
  EXPECT_THAT(run.Gauges(), ::testing::Contains(Pair("checkpoint_overdue", 0)));
  run.Steps(700, 801);
  EXPECT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 1u);
  run.Steps(801, 802);
  EXPECT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 2u);
}

TEST(CheckpointSignalTest, AFailedSaveIsReportedOnceWithTheLastCommittedCheckpoint) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  run.Steps(1, 150, {100});
  for (uint32_t rank = 0; rank < 8; ++rank) run.Fail(150, rank, rank / 4, "OSError: disk full");
  run.Sweep();
  const std::vector<Event> failed = run.Found(EventKind::kCheckpointFailed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].rank, 0u);
  EXPECT_EQ(failed[0].node, "node-a");
  EXPECT_EQ(failed[0].message,
            "rank 0 on node-a failed to save the checkpoint of step 150: OSError: disk full; "
            "the last committed checkpoint is step 100, 49 steps ago");
  EXPECT_THAT(Figure(failed[0], "step"), Optional(150.0));
  EXPECT_THAT(Figure(failed[0], "last_checkpoint_step"), Optional(100.0));
  EXPECT_THAT(Figure(failed[0], "age_steps"), Optional(49.0));
}

TEST(CheckpointSignalTest, TwoStepsFailedSavesReportedInterleavedAreOneEventEach) {
  // Ranks that took the plan a step apart save at 466 and 467 and report
  // their failures interleaved (e2e_signals in CI run 13 saw 466 and 467
  // reported twice each).
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  run.Steps(1, 468, {100});
  run.Fail(466, 1, 0, "OSError: [Errno 28] No space left on device");
  run.Fail(467, 0, 0, "OSError: [Errno 28] No space left on device");
  run.Fail(466, 3, 1, "OSError: [Errno 28] No space left on device");
  run.Fail(467, 3, 1, "OSError: [Errno 28] No space left on device");
  run.Sweep();
  const std::vector<Event> failed = run.Found(EventKind::kCheckpointFailed);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_THAT(Figure(failed[0], "step"), Optional(466.0));
  EXPECT_THAT(Figure(failed[1], "step"), Optional(467.0));
}

TEST(CheckpointSignalTest, ABackgroundWriteThatFailsLaterTakesItsCheckpointBack) {
  CheckpointRun run;
  run.Plan(PeriodicPlan(1, 100, 0));
  run.Steps(1, 250, {100, 200});
  run.Fail(200, 5, 1, "CheckpointWriteFailed: upload: 503");
  run.Steps(250, 301);  // 200 steps past 100, the last one committed now
  EXPECT_EQ(run.Found(EventKind::kCheckpointFailed).size(), 1u);
  EXPECT_THAT(run.Gauges(), ::testing::Contains(Pair("checkpoint_age_steps", 200)));
  run.Steps(301, 302);
  EXPECT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 1u);
}

TEST(CheckpointSignalTest, TheOverdueSwitchOffLeavesFailedSavesReported) {
  CheckpointOverdueOptions off;
  off.enabled = false;
  CheckpointRun run(off);
  run.Plan(PeriodicPlan(1, 10, 0));
  run.Steps(1, 500);
  EXPECT_EQ(run.Found(EventKind::kCheckpointOverdue).size(), 0u);
  run.Fail(499, 2, 0, "OSError: quota exceeded");
  run.Sweep();
  EXPECT_EQ(run.Found(EventKind::kCheckpointFailed).size(), 1u);
  EXPECT_THAT(run.Gauges(), UnorderedElementsAre(Pair("checkpoint_age_steps", 499),
                                                 Pair("checkpoint_planned_steps", 10)));
}

TEST(CheckpointSignalTest, ThePlanInForceIsTheLatestStartedWithTheGreatestIdAmongEquals) {
  const std::vector<CheckpointPlanSpec> plans = {PeriodicPlan(1, 100, 0), PeriodicPlan(3, 50, 500),
                                                 PeriodicPlan(2, 70, 500),
                                                 PeriodicPlan(4, 10, 900)};
  EXPECT_EQ(PlanInForce(plans, 499)->plan_id, 1u);
  EXPECT_EQ(PlanInForce(plans, 500)->plan_id, 3u);
  EXPECT_EQ(PlanInForce(plans, 900)->plan_id, 4u);
  EXPECT_EQ(PlanInForce({}, 900), nullptr);
  EXPECT_EQ(PlanInForce({PeriodicPlan(1, 100, 10)}, 9), nullptr);
}

}  // namespace
}  // namespace trainsup
