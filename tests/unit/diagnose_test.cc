// The triage flowchart (daemon/core/diagnose.h), one branch per test, over
// constructed read-model views and a fake clock: the verdict, the finding
// that decides it and its numbers, never prose.
#include "daemon/core/diagnose.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

std::optional<double> FigureOf(const Finding& f, const std::string& name) {
  for (const auto& [key, value] : f.figures) {
    if (key == name) return value;
  }
  return std::nullopt;
}

const Finding& FindingOf(const Diagnosis& d, DiagnosisCheck check) {
  for (const Finding& f : d.findings) {
    if (f.check == check) return f;
  }
  ADD_FAILURE() << "no finding " << DiagnosisCheckName(check);
  return d.findings.front();
}

// A running job of 4 ranks, 2 a node (n1: 0, 1; n2: 2, 3), stepping, with
// nothing wrong: 2 % data wait, compute p99 0.1 s everywhere, 10 % of each
// step in the collective.
class DiagnoseTest : public ::testing::Test {
 protected:
  DiagnoseTest() {
    job_.id = "job";
    job_.generation = 2;
    job_.world_size = 4;
    job_.ranks_reporting = 4;
    job_.state = JobState::kRunning;
    job_.step = 500;
    job_.last_progress = kNow - absl::Milliseconds(200);
    job_.stall_threshold = absl::Seconds(3);
    job_.nodes = job_.agents_waiting = 2;
    job_.ledger.seconds[static_cast<int>(Bucket::kUseful)] = 90;
    job_.ledger.seconds[static_cast<int>(Bucket::kLost)] = 10;
    nodes_.resize(2);
    nodes_[0].name = "n1";
    nodes_[1].name = "n2";
    for (uint32_t r = 0; r < 4; ++r) {
      RankView& row = ranks_.emplace_back();
      row.rank = r;
      row.node = r / 2;
      row.step = 500;
      row.has_step_samples = row.has_compute_samples = true;
      row.compute_p50 = 0.09f;
      row.compute_p99 = 0.1f;
      row.has_step_shares = row.has_comm_share = true;
      row.data_wait_share = 0.02f;
      row.comm_share = 0.1f;
    }
  }

  Diagnosis Run(absl::Time now = kNow) {
    DiagnoseInput in;
    in.job = &job_;
    in.ranks = &ranks_;
    in.nodes = &nodes_;
    in.stacks = stacks_ ? &*stacks_ : nullptr;
    in.events = &events_;
    return Diagnose(in, now, options_);
  }

  Event& AddEvent(EventKind kind, absl::Time time, std::optional<uint32_t> rank = std::nullopt,
                  const std::string& node = "") {
    Event& e = events_.emplace_back();
    e.id = events_.size();
    e.kind = kind;
    e.time = time;
    e.job = "job";
    e.generation = job_.generation;
    e.rank = rank;
    e.node = node;
    e.message = "message";
    return e;
  }

  // The failure the state store recorded: `rank` on `node`, charged to it
  // or not.
  void RecordFailure(uint32_t rank, const std::string& node, bool charged) {
    FailureRow failure;
    failure.kind = "crash";
    failure.rank = rank;
    failure.node = node;
    failure.charged = charged;
    job_.last_failure = failure;
  }

  JobView job_;
  std::vector<RankView> ranks_;
  std::vector<NodeView> nodes_;
  std::optional<StacksView> stacks_;
  std::vector<Event> events_;
  DiagnoseOptions options_;
};

TEST_F(DiagnoseTest, HealthyWalksEveryCheckInOrderAndGivesTheGoodput) {
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kHealthy) << d.headline;
  ASSERT_EQ(d.findings.size(), 5u);
  const DiagnosisCheck order[] = {DiagnosisCheck::kProgress, DiagnosisCheck::kInput,
                                  DiagnosisCheck::kStraggler, DiagnosisCheck::kCommunication,
                                  DiagnosisCheck::kSignals};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(d.findings[i].check, order[i]);
    EXPECT_EQ(d.findings[i].status, FindingStatus::kOk) << d.findings[i].summary;
  }
  EXPECT_DOUBLE_EQ(d.ledger.goodput(), 0.9);
  EXPECT_NE(d.headline.find("90.0%"), std::string::npos) << d.headline;
  const Finding& progress = d.findings[0];
  EXPECT_DOUBLE_EQ(*FigureOf(progress, "step"), 500);
  EXPECT_NEAR(*FigureOf(progress, "since_progress_seconds"), 0.2, 1e-9);
  EXPECT_DOUBLE_EQ(*FigureOf(progress, "threshold_seconds"), 3);
}

TEST_F(DiagnoseTest, NoStepYetIsStarting) {
  job_.step = -1;
  job_.last_progress = absl::InfinitePast();
  job_.ranks_reporting = 3;
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kStarting);
  EXPECT_EQ(d.findings[0].status, FindingStatus::kNoData);
  EXPECT_DOUBLE_EQ(*FigureOf(d.findings[0], "ranks_reporting"), 3);
}

TEST_F(DiagnoseTest, AHangNamesTheCulpritAndShowsItsStack) {
  job_.stalled = true;
  job_.stall_culprit = 2;
  job_.stall_culprit_node = "n2";
  job_.last_progress = kNow - absl::Seconds(7);
  Event& stall = AddEvent(EventKind::kStall, kNow - absl::Seconds(4), 2, "n2");
  stall.figures = {{"silent_seconds", 3.2}, {"threshold_seconds", 3}, {"step", 500}};
  stacks_.emplace();
  stacks_->generation = 2;
  stacks_->event_id = stall.id;
  stacks_->groups.push_back({{2}, {"n2"}, "File \"train.py\", line 270 in main (sleep)", true});
  stacks_->groups.push_back({{0, 1, 3}, {"n1", "n1", "n2"}, "File \"train.py\", all_reduce", false});

  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kNotProgressing);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.status, FindingStatus::kProblem);
  EXPECT_EQ(f.rank, 2u);
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.event_id, stall.id);
  EXPECT_EQ(f.stack, stacks_->groups[0].stack);
  EXPECT_EQ(f.command, "trainsupctl stacks job");
  EXPECT_DOUBLE_EQ(*FigureOf(f, "since_progress_seconds"), 7);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "threshold_seconds"), 3);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "step"), 500);
  EXPECT_EQ(d.headline, f.summary);
}

TEST_F(DiagnoseTest, StacksOfAnotherFailureAreNotShown) {
  job_.state = JobState::kStopping;
  Event& crash = AddEvent(EventKind::kCrash, kNow - absl::Seconds(1), 1, "n1");
  crash.generation = 2;
  stacks_.emplace();
  stacks_->generation = 1;
  stacks_->event_id = 99;
  stacks_->groups.push_back({{3}, {"n2"}, "old stack", true});
  const Diagnosis d = Run();
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.rank, 1u);
  EXPECT_TRUE(f.stack.empty());
}

TEST_F(DiagnoseTest, StoppingSaysTheNextGenerationAndTheNodeFault) {
  job_.state = JobState::kStopping;
  job_.restarts = 1;
  Event& crash = AddEvent(EventKind::kCrash, kNow - absl::Seconds(1), 3, "n2");
  crash.figures = {{"exit_code", -1}, {"signal", 9}, {"step", 480}};
  RecordFailure(3, "n2", /*charged=*/true);
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kNotProgressing);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.rank, 3u);
  EXPECT_EQ(f.node, "n2");
  EXPECT_DOUBLE_EQ(*FigureOf(f, "node_fault"), 1);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "signal"), 9);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "restarts"), 1);
  EXPECT_NE(f.handling.find("generation 3"), std::string::npos) << f.handling;
}

TEST_F(DiagnoseTest, RestartingSaysWhenOnTheClock) {
  job_.state = JobState::kRestarting;
  job_.restart_at = kNow + absl::Milliseconds(2500);
  AddEvent(EventKind::kCrash, kNow - absl::Seconds(3), 1, "n1");
  const Diagnosis now = Run();
  EXPECT_DOUBLE_EQ(*FigureOf(now.findings[0], "restart_in_seconds"), 2.5);
  const Diagnosis later = Run(kNow + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(*FigureOf(later.findings[0], "restart_in_seconds"), 1.5);
}

TEST_F(DiagnoseTest, HeldForTheWorkloadSaysResumeAndTheHoldsFigures) {
  job_.state = JobState::kHeld;
  job_.state_reason = "the same ValueError at step 120 in generations 1 and 2";
  AddEvent(EventKind::kCrash, kNow - absl::Seconds(20), 1, "n1").figures = {{"step", 120}};
  AddEvent(EventKind::kHold, kNow - absl::Seconds(19)).figures = {{"workload_repeat", 1}};
  RecordFailure(1, "n1", /*charged=*/false);
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kNotProgressing);
  const Finding& f = d.findings[0];
  EXPECT_DOUBLE_EQ(*FigureOf(f, "node_fault"), 0);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "workload_repeat"), 1);
  EXPECT_NE(f.handling.find("trainsupctl resume job"), std::string::npos) << f.handling;
}

TEST_F(DiagnoseTest, AHeldJobWhoseAgentsLeftSaysNoAgentWaits) {
  job_.state = JobState::kHeld;
  job_.state_reason = "restart limit reached";
  Diagnosis d = Run();
  EXPECT_EQ(d.findings[0].handling, "held: not restarted until `trainsupctl resume job`");
  EXPECT_DOUBLE_EQ(*FigureOf(d.findings[0], "agents_waiting"), 2);

  job_.agents_waiting = 0;
  d = Run();
  EXPECT_EQ(d.findings[0].handling,
            "held: not restarted, and no agent waits to run it (its agents have left): start "
            "them again, then `trainsupctl resume job`");
  EXPECT_DOUBLE_EQ(*FigureOf(d.findings[0], "agents_waiting"), 0);
}

TEST_F(DiagnoseTest, InputBoundNamesTheNodeWithItsShare) {
  ranks_[2].data_wait_share = 0.40f;
  ranks_[3].data_wait_share = 0.42f;
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kInputBound) << d.headline;
  const Finding& f = FindingOf(d, DiagnosisCheck::kInput);
  EXPECT_EQ(f.status, FindingStatus::kProblem);
  EXPECT_EQ(f.node, "n2");
  EXPECT_EQ(f.rank, 3u);
  EXPECT_NEAR(*FigureOf(f, "node_share"), 0.41, 1e-6);
  EXPECT_NEAR(*FigureOf(f, "rank_share"), 0.42, 1e-6);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "nodes_over"), 1);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "nodes"), 2);
  EXPECT_EQ(f.command, "trainsupctl job job");
}

TEST_F(DiagnoseTest, InputBoundEverywhereCountsTheNodes) {
  for (RankView& r : ranks_) r.data_wait_share = 0.5f;
  const Diagnosis d = Run();
  const Finding& f = FindingOf(d, DiagnosisCheck::kInput);
  EXPECT_EQ(f.status, FindingStatus::kProblem);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "nodes_over"), 2);
  EXPECT_NEAR(*FigureOf(f, "job_median_share"), 0.5, 1e-6);
}

TEST_F(DiagnoseTest, JustBelowTheThresholdIsNotInputBound) {
  options_.input_bound_share = 0.3;
  ranks_[2].data_wait_share = ranks_[3].data_wait_share = 0.29f;
  const Diagnosis d = Run();
  const Finding& f = FindingOf(d, DiagnosisCheck::kInput);
  EXPECT_EQ(f.status, FindingStatus::kOk);
  EXPECT_EQ(f.node, "n2");
}

TEST_F(DiagnoseTest, StragglerNamesTheRankItsRatioAndHowLong) {
  ranks_[3].compute_p99 = 0.18f;
  ranks_[3].straggler = true;
  job_.stragglers = {{3, 0.18}};
  const Event& flagged = AddEvent(EventKind::kStraggler, kNow - absl::Minutes(12), 3, "n2");
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kStraggler) << d.headline;
  const Finding& f = FindingOf(d, DiagnosisCheck::kStraggler);
  EXPECT_EQ(f.rank, 3u);
  EXPECT_EQ(f.node, "n2");
  EXPECT_NEAR(*FigureOf(f, "ratio"), 1.8, 1e-6);
  EXPECT_NEAR(*FigureOf(f, "median_compute_p99_seconds"), 0.1, 1e-6);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "persistent_seconds"), 720);
  EXPECT_EQ(f.event_id, flagged.id);
  EXPECT_EQ(f.command, "trainsupctl ranks job --sort compute-p99");
}

TEST_F(DiagnoseTest, ASlowRankNotFlaggedIsNoStraggler) {
  ranks_[1].compute_p99 = 0.3f;  // the detector has not flagged it (yet)
  const Diagnosis d = Run();
  const Finding& f = FindingOf(d, DiagnosisCheck::kStraggler);
  EXPECT_EQ(f.status, FindingStatus::kOk);
  EXPECT_EQ(f.rank, 1u);
  EXPECT_NEAR(*FigureOf(f, "ratio"), 3, 1e-6);
}

TEST_F(DiagnoseTest, CommunicationBoundGivesTheShareAndTrend) {
  for (RankView& r : ranks_) {
    r.comm_share = 0.45f;
    r.comm_share_trend = 0.08f;
  }
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kCommunicationBound) << d.headline;
  const Finding& f = FindingOf(d, DiagnosisCheck::kCommunication);
  EXPECT_NEAR(*FigureOf(f, "comm_share"), 0.45, 1e-6);
  EXPECT_NEAR(*FigureOf(f, "trend"), 0.08, 1e-6);
}

TEST_F(DiagnoseTest, WaitingForASlowPeerIsNotCommunication) {
  // Rank 2 computes 3x longer; the others wait for it in the collective.
  for (RankView& r : ranks_) r.comm_share = 0.67f;
  ranks_[2].comm_share = 0.05f;
  const Diagnosis d = Run();
  const Finding& f = FindingOf(d, DiagnosisCheck::kCommunication);
  EXPECT_EQ(f.status, FindingStatus::kOk);
  EXPECT_EQ(f.rank, 2u);
  EXPECT_NEAR(*FigureOf(f, "comm_share"), 0.05, 1e-6);
}

TEST_F(DiagnoseTest, TheFirstProblemInTheFlowchartDecides) {
  // Input-bound and a straggler at once (a slow loader on one node makes
  // its ranks' steps long): input is checked first.
  ranks_[2].data_wait_share = ranks_[3].data_wait_share = 0.5f;
  ranks_[2].straggler = true;
  ranks_[2].compute_p99 = 0.3f;
  job_.stragglers = {{2, 0.3}};
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kInputBound);
  EXPECT_EQ(FindingOf(d, DiagnosisCheck::kStraggler).status, FindingStatus::kProblem);
  // A failure comes before both.
  job_.stalled = true;
  EXPECT_EQ(Run().verdict, DiagnosisVerdict::kNotProgressing);
}

TEST_F(DiagnoseTest, WithoutComputeTimesThoseChecksHaveNoData) {
  for (RankView& r : ranks_) r.has_compute_samples = r.has_comm_share = false;
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kHealthy);
  EXPECT_EQ(FindingOf(d, DiagnosisCheck::kStraggler).status, FindingStatus::kNoData);
  EXPECT_EQ(FindingOf(d, DiagnosisCheck::kCommunication).status, FindingStatus::kNoData);
}

TEST_F(DiagnoseTest, FinishedIsFinished) {
  job_.state = JobState::kFinished;
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kFinished);
  EXPECT_DOUBLE_EQ(*FigureOf(d.findings[0], "step"), 500);
  // Its goodput is final, not "so far".
  EXPECT_EQ(d.headline,
            "finished at step 500 (generation 2); goodput 90.0% (useful 1m30s of 1m40s)");
}

TEST_F(DiagnoseTest, RanksExitingAreEndingNotStepping) {
  job_.seen.dead = 3;
  job_.stall_threshold.reset();  // the stall rule does not judge a job with a rank ended
  const Diagnosis d = Run();
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.status, FindingStatus::kOk);
  EXPECT_EQ(f.summary, "ending: 3 of 4 ranks exited; the last step 500 was 0.2s ago");
  EXPECT_DOUBLE_EQ(*FigureOf(f, "ranks_exited"), 3);
  EXPECT_FALSE(FigureOf(f, "threshold_seconds").has_value());
}

TEST_F(DiagnoseTest, ARecentTrainingSignalIsAFindingWithItsFigures) {
  Event& e = AddEvent(EventKind::kWorldSizeChanged, kNow - absl::Minutes(1));
  e.figures = {{"old_world_size", 8}, {"new_world_size", 4}};
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kTrainingSignal) << d.headline;
  const Finding& f = FindingOf(d, DiagnosisCheck::kSignals);
  EXPECT_EQ(f.status, FindingStatus::kProblem);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "old_world_size"), 8);
  EXPECT_DOUBLE_EQ(*FigureOf(f, "age_seconds"), 60);
  EXPECT_EQ(f.event_id, e.id);
}

TEST_F(DiagnoseTest, AnOldTrainingSignalIsForgotten) {
  AddEvent(EventKind::kWorldSizeChanged, kNow - absl::Minutes(11));
  const Diagnosis d = Run();
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kHealthy);
  EXPECT_DOUBLE_EQ(*FigureOf(FindingOf(d, DiagnosisCheck::kSignals), "window_seconds"), 600);
}

// Every kind in diagnose.cc's table of training signals gives one finding
// of its latest event.
TEST_F(DiagnoseTest, EveryTrainingSignalKindIsOneFindingOfItsLatestEvent) {
  std::vector<EventKind> kinds;
  for (int k = 0; k < kEventKindCount; ++k) {
    if (IsTrainingSignal(static_cast<EventKind>(k))) kinds.push_back(static_cast<EventKind>(k));
  }
  ASSERT_FALSE(kinds.empty());
  EXPECT_TRUE(IsTrainingSignal(EventKind::kNotFinite));
  EXPECT_TRUE(IsTrainingSignal(EventKind::kReplicaMismatch));
  EXPECT_FALSE(IsTrainingSignal(EventKind::kStall));
  EXPECT_FALSE(IsTrainingSignal(EventKind::kStraggler));
  for (EventKind kind : kinds) {
    AddEvent(kind, kNow - absl::Seconds(30), 1, "n1");
    AddEvent(kind, kNow - absl::Seconds(10), 2, "n2");
  }
  const Diagnosis d = Run();
  std::vector<const Finding*> signals;
  for (const Finding& f : d.findings) {
    if (f.check == DiagnosisCheck::kSignals) signals.push_back(&f);
  }
  ASSERT_EQ(signals.size(), kinds.size());
  for (const Finding* f : signals) {
    EXPECT_EQ(f->rank, 2u);
    EXPECT_EQ(f->node, "n2");
    EXPECT_DOUBLE_EQ(*FigureOf(*f, "age_seconds"), 10);
  }
}

TEST(DiagnosisNamesTest, AreStable) {
  EXPECT_EQ(DiagnosisVerdictName(DiagnosisVerdict::kInputBound), "input_bound");
  EXPECT_EQ(DiagnosisVerdictName(DiagnosisVerdict::kNotProgressing), "not_progressing");
  EXPECT_EQ(DiagnosisVerdictName(DiagnosisVerdict::kCommunicationBound), "communication_bound");
  EXPECT_EQ(DiagnosisCheckName(DiagnosisCheck::kCommunication), "communication");
  EXPECT_EQ(FindingStatusName(FindingStatus::kNoData), "no_data");
}

}  // namespace
}  // namespace trainsup
