// The event constructors (daemon/core/events.h): each kind's job,
// generation, rank, node and figures, and its message made from them. The
// values are chosen so that every number a message states can come only
// from its input.
#include "daemon/core/events.h"

#include <cmath>
#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_entry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::trainsup::testing::AliveProcess;
using ::trainsup::testing::DeadProcess;
using ::trainsup::testing::MakeHeartbeat;
using ::trainsup::testing::PeriodicPlan;

absl::Time T() { return absl::FromUnixSeconds(1'700'000'000); }
const EventJob kJob{"train-7", 3};

// The event's own fields, the same for every kind.
void ExpectHeader(const Event& e, EventKind kind) {
  EXPECT_EQ(e.kind, kind);
  EXPECT_EQ(e.time, T());
  EXPECT_EQ(e.job, "train-7");
  EXPECT_EQ(e.generation, 3u);
  EXPECT_EQ(e.id, 0u);  // the log assigns it
}

TEST(EventJobTest, NoJobNamesNone) {
  const EventJob none = EventJobOf(nullptr);
  EXPECT_EQ(none.id, "");
  EXPECT_EQ(none.generation, 0u);
}

// ---- Detection ----

StallVerdict Stalled(double silent_s, double threshold_s, bool startup = false) {
  StallVerdict v;
  v.stalled = true;
  v.silent = absl::Seconds(silent_s);
  v.threshold = absl::Seconds(threshold_s);
  v.startup = startup;
  return v;
}

// FindCulprit's verdict: `seen` ranks seen, `behind` of them furthest
// behind at (`step`, `phase`), `rank` named among them or none.
Culprit Behind(uint32_t seen, uint32_t behind, int64_t step, StepPhase phase,
               std::optional<uint32_t> rank) {
  Culprit c;
  c.rank = rank;
  c.seen_ranks = seen;
  c.behind_ranks = behind;
  c.behind_step = step;
  c.behind_phase = phase;
  return c;
}

TEST(StallEventTest, ACulpritIsItsRankAndNode) {
  const Culprit c = Behind(8, 2, 41, StepPhase::kComputing, 6);

  const Event e = StallEvent(T(), kJob, Stalled(25.5, 20), 42, c, "node-c");

  ExpectHeader(e, EventKind::kStall);
  EXPECT_EQ(e.rank, 6u);
  EXPECT_EQ(e.node, "node-c");
  EXPECT_EQ(e.message,
            "no rank advanced for 25.5s (threshold 20.0s) at step 42; suspect rank 6 on node-c, "
            "furthest behind: step 41, computing (2 ranks there; this one silent longest)");
  EXPECT_THAT(e.figures, ElementsAre(Pair("silent_seconds", 25.5), Pair("threshold_seconds", 20),
                                     Pair("step", 42), Pair("seen_ranks", 8),
                                     Pair("behind_step", 41), Pair("behind_ranks", 2)));
}

TEST(StallEventTest, ALoneRankFurthestBehindSaysNoTie) {
  const Culprit c = Behind(4, 1, 9, StepPhase::kBetweenSteps, 1);

  const Event e = StallEvent(T(), kJob, Stalled(21, 20), 10, c, "node-a");

  EXPECT_EQ(e.message, "no rank advanced for 21.0s (threshold 20.0s) at step 10; suspect rank 1 "
                       "on node-a, furthest behind: step 9, between_steps");
}

TEST(StallEventTest, AllRanksAtOnePlaceIsUndeterminedWithNoRankOrNode) {
  const Culprit c = Behind(4, 4, 10, StepPhase::kComputeDone, std::nullopt);

  const Event e = StallEvent(T(), kJob, Stalled(30, 20), 10, c, "ignored");

  ExpectHeader(e, EventKind::kStall);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "");
  EXPECT_EQ(e.message,
            "no rank advanced for 30.0s (threshold 20.0s) at step 10; culprit: all 4 ranks seen at "
            "step 10, compute_done; undetermined (bracket each step's own work with hb.compute() "
            "to name the culprit)");
  EXPECT_THAT(e.figures, ElementsAre(Pair("silent_seconds", 30), Pair("threshold_seconds", 20),
                                     Pair("step", 10), Pair("seen_ranks", 4),
                                     Pair("behind_step", 10), Pair("behind_ranks", 4)));
}

TEST(StallEventTest, TheOnlyRankSeenAndNoRankAtAll) {
  const Culprit one = Behind(1, 1, 3, StepPhase::kComputeDone, std::nullopt);
  EXPECT_EQ(StallEvent(T(), kJob, Stalled(30, 20), 3, one, "").message,
            "no rank advanced for 30.0s (threshold 20.0s) at step 3; culprit: the only rank seen "
            "at step 3, compute_done; undetermined (bracket each step's own work with "
            "hb.compute() to name the culprit)");

  const Event none = StallEvent(T(), kJob, Stalled(400, 300, /*startup=*/true), -1, Culprit(), "");
  EXPECT_EQ(none.message, "no first step 400.0s after the generation started (start-up grace "
                          "300.0s); culprit: no rank has reported");
  // No rank seen: no place to give figures of.
  EXPECT_THAT(none.figures, ElementsAre(Pair("silent_seconds", 400),
                                        Pair("threshold_seconds", 300), Pair("step", -1)));
}

TEST(NodeLostEventTest, InAStallItNamesTheNodeAndItsRanks) {
  const Event e = NodeLostInStallEvent(T(), kJob, Stalled(24, 20), 77, "node-b",
                                       absl::Seconds(31.25), {2, 3});

  ExpectHeader(e, EventKind::kNodeLost);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "node node-b lost: not heard for 31.2s (ranks 2, 3) while no rank advanced for 24.0s "
            "(threshold 20.0s) at step 77 and every rank that can be seen waits for it");
  EXPECT_THAT(e.figures, ElementsAre(Pair("silent_seconds", 24), Pair("threshold_seconds", 20),
                                     Pair("unheard_seconds", 31.25), Pair("lost_ranks", 2),
                                     Pair("step", 77)));
}

// A job of four ranks on two nodes (0, 1 on node 0; 2, 3 on node 1), at
// step 12 and alive, for the crash events to read the ranks' failures from.
class CrashEventTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t r = 0; r < 4; ++r) {
      ASSERT_EQ(job_.Apply(T(), r / 2, MakeHeartbeat(HeartbeatKind::kStep, r, 12)), std::nullopt);
      job_.ApplyProcess(T(), r / 2, AliveProcess(r));
    }
  }
  void Raise(uint32_t rank, const std::string& type, const std::string& message) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kException, rank, 12);
    hb.exception_type = type;
    hb.exception_message = message;
    ASSERT_EQ(job_.Apply(T(), rank / 2, hb), std::nullopt);
  }
  // A verdict of `kind` naming `rank`, `failed` ranks failed, `victims` of
  // them victims; the failure ended with exit code `code` (or `signal`), or
  // its status is not known yet (nullopt).
  static CrashVerdict Verdict(CrashVerdict::Kind kind, std::optional<uint32_t> rank,
                              uint32_t failed, uint32_t victims, std::optional<int32_t> code,
                              int32_t signal = 0) {
    CrashVerdict v;
    v.kind = kind;
    v.rank = rank;
    v.failed_ranks = failed;
    v.victims = victims;
    v.death.exit_known = code.has_value();
    v.death.exit_code = code.value_or(0);
    v.death.signal = signal;
    return v;
  }

  Job job_{"job", 16, 16};
};

TEST_F(CrashEventTest, TheFirstRankToFailOnItsOwn) {
  Raise(2, "RuntimeError", "CUDA error: an illegal memory access");
  const CrashVerdict v = Verdict(CrashVerdict::Kind::kRank, 2, 3, 2, 1);

  const Event e = CrashEvent(T(), kJob, v, "node-b", job_, std::nullopt);

  ExpectHeader(e, EventKind::kCrash);
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "rank 2 on node-b died first (exit code 1): RuntimeError: CUDA error: an illegal memory "
            "access; 3 of 4 ranks failed, 2 of them victims of a peer");
  EXPECT_THAT(e.figures, ElementsAre(Pair("exit_code", 1), Pair("signal", 0),
                                     Pair("failed_ranks", 3), Pair("victims", 2), Pair("step", 12),
                                     Pair("ranks", 4), Pair("workload_repeat", 0),
                                     Pair("exit_known", 1)));
}

TEST_F(CrashEventTest, AKillWithoutAWordAndAWorkloadRepeat) {
  const CrashVerdict v = Verdict(CrashVerdict::Kind::kRank, 1, 1, 0, 0, SIGKILL);

  const Event e = CrashEvent(T(), kJob, v, "node-a", job_,
                             std::string("the same killed at step 12 in generations 2 and 3"));

  EXPECT_EQ(e.message,
            "rank 1 on node-a died first (killed (SIGKILL: out of memory?)); 1 of 4 ranks failed; "
            "the same killed at step 12 in generations 2 and 3");
  EXPECT_THAT(e.figures, ElementsAre(Pair("exit_code", 0), Pair("signal", SIGKILL),
                                     Pair("failed_ranks", 1), Pair("victims", 0), Pair("step", 12),
                                     Pair("ranks", 4), Pair("workload_repeat", 1),
                                     Pair("exit_known", 1)));
}

TEST_F(CrashEventTest, AnExitTheRankBeganWhileItsStatusIsUnknown) {
  Heartbeat exit = MakeHeartbeat(HeartbeatKind::kExit, 3, 12);
  exit.exit_code = 5;
  ASSERT_EQ(job_.Apply(T(), 1, exit), std::nullopt);
  const Event e = CrashEvent(T(), kJob, Verdict(CrashVerdict::Kind::kRank, 3, 1, 0, std::nullopt),
                             "node-b",
                             job_, std::nullopt);

  EXPECT_EQ(e.message, "rank 3 on node-b died first (still tearing down, after it began to exit "
                       "with code 5); 1 of 4 ranks failed");
  EXPECT_THAT(e.figures, ElementsAre(Pair("exit_code", 0), Pair("signal", 0),
                                     Pair("failed_ranks", 1), Pair("victims", 0), Pair("step", 12),
                                     Pair("ranks", 4), Pair("workload_repeat", 0),
                                     Pair("exit_known", 0), Pair("exiting_code", 5)));
}

TEST_F(CrashEventTest, OnlyVictimsWithEveryRankSeenNamesTheFirstVictim) {
  Raise(0, "RuntimeError", "Connection closed by peer");
  const CrashVerdict v = Verdict(CrashVerdict::Kind::kNoCulprit, 0, 4, 4, 1);

  const Event e = CrashEvent(T(), kJob, v, "node-a", job_, std::nullopt);

  ExpectHeader(e, EventKind::kCrash);
  EXPECT_EQ(e.rank, 0u);
  EXPECT_EQ(e.message,
            "rank 0 on node-a reported a peer's failure first (exit code 1): RuntimeError: "
            "Connection closed by peer; no rank failed on its own and every rank can be seen; 4 "
            "of 4 ranks failed, 4 of them victims of a peer");
}

TEST_F(CrashEventTest, ANodeLostIsANodeLostEventWithoutARank) {
  Raise(1, "RuntimeError", "Connection closed by peer");
  CrashVerdict v = Verdict(CrashVerdict::Kind::kNodeLost, std::nullopt, 2, 2, 1);
  v.lost_ranks = {2, 3};
  v.first_victim = 1;

  const Event e = CrashEvent(T(), kJob, v, "node-b", job_, std::nullopt);

  ExpectHeader(e, EventKind::kNodeLost);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "node node-b lost: its agent cannot be heard and its ranks 2, 3 cannot be seen, while "
            "every rank that failed is a victim of a peer (exit code 1): RuntimeError: Connection "
            "closed by peer first on rank 1; 2 of 4 ranks failed, 2 of them victims of a peer");
  EXPECT_THAT(e.figures, ElementsAre(Pair("lost_ranks", 2), Pair("failed_ranks", 2),
                                     Pair("victims", 2), Pair("ranks", 4), Pair("first_victim", 1),
                                     Pair("exit_code", 1), Pair("signal", 0),
                                     Pair("exit_known", 1)));
}

TEST_F(CrashEventTest, ACommandThatFailedWithNoRankToName) {
  const CrashVerdict v = Verdict(CrashVerdict::Kind::kLauncher, std::nullopt, 0, 0, 2);

  const Event e = CrashEvent(T(), kJob, v, "node-a", job_, std::nullopt);

  ExpectHeader(e, EventKind::kCrash);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "node-a");
  EXPECT_EQ(e.message, "the command on node-a failed (exit code 2) with no rank death to name");
  EXPECT_THAT(e.figures, ElementsAre(Pair("exit_code", 2), Pair("signal", 0)));
}

TEST(StragglerEventTest, FlaggedSaysForHowLongAndClearedSaysSo) {
  StragglerChange change;
  change.rank = 5;
  change.flagged = true;
  change.rank_p99_s = 0.3;
  change.job_median_p99_s = 0.125;
  change.ratio = 2.4;
  StragglerOptions options;
  options.persistence = 4;
  options.window = 25;

  const Event flagged = StragglerEvent(T(), kJob, change, "node-c", options);

  ExpectHeader(flagged, EventKind::kStraggler);
  EXPECT_EQ(flagged.rank, 5u);
  EXPECT_EQ(flagged.node, "node-c");
  EXPECT_EQ(flagged.message, "rank 5 on node-c: compute p99 0.300s vs job median p99 0.125s "
                             "(2.4x) for 4 windows of 25 steps");
  EXPECT_THAT(flagged.figures,
              ElementsAre(Pair("rank_p99_seconds", 0.3), Pair("job_median_p99_seconds", 0.125),
                          Pair("ratio", 2.4), Pair("windows", 4), Pair("window_steps", 25)));

  change.flagged = false;
  const Event cleared = StragglerEvent(T(), kJob, change, "node-c", options);

  ExpectHeader(cleared, EventKind::kStragglerCleared);
  EXPECT_EQ(cleared.message,
            "rank 5 on node-c: compute p99 0.300s vs job median p99 0.125s (2.4x) again in line");
  EXPECT_THAT(cleared.figures, ElementsAre(Pair("rank_p99_seconds", 0.3),
                                           Pair("job_median_p99_seconds", 0.125),
                                           Pair("ratio", 2.4)));
}

TEST(NodeEventTest, UnreachableAndReachableAgain) {
  const Event lost = NodeUnreachableEvent(T(), kJob, "node-b", absl::Seconds(61.5),
                                          absl::Seconds(60), {2, 3});
  ExpectHeader(lost, EventKind::kNodeUnreachable);
  EXPECT_EQ(lost.node, "node-b");
  EXPECT_EQ(lost.message, "node node-b not heard for 61.5s (threshold 60.0s); ranks 2, 3 unknown; "
                          "nothing is stopped while the job steps");
  EXPECT_THAT(lost.figures, ElementsAre(Pair("unheard_seconds", 61.5), Pair("ranks", 2),
                                        Pair("threshold_seconds", 60)));
  EXPECT_EQ(NodeUnreachableEvent(T(), kJob, "n9", absl::Seconds(90), absl::Seconds(45), {}).message,
            "node n9 not heard for 90.0s (threshold 45.0s); it has no rank unknown; nothing is "
            "stopped while the job steps");

  const Event back = NodeReachableEvent(T(), EventJob(), "node-b", absl::Seconds(75));
  EXPECT_EQ(back.kind, EventKind::kNodeReachable);
  EXPECT_EQ(back.job, "");
  EXPECT_EQ(back.node, "node-b");
  EXPECT_EQ(back.message, "node node-b heard again after 75.0s of silence");
  EXPECT_THAT(back.figures, ElementsAre(Pair("silent_seconds", 75)));
}

TEST(StacksEventTest, CountsTheRanksThatDidNotAnswer) {
  const Event e = StacksEvent(T(), kJob, "node-a", 8, 6, 2.25);

  ExpectHeader(e, EventKind::kStacks);
  EXPECT_EQ(e.node, "node-a");
  EXPECT_EQ(e.message, "Python stacks of 8 rank(s) on node-a collected in 2.2s (2 did not answer); "
                       "`trainsupctl stacks train-7` shows them");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("ranks", 8), Pair("answered", 6), Pair("collect_seconds", 2.25)));
}

// ---- The lifecycle ----

TEST(LifecycleEventTest, StateChangeAndResumeQuoteTheReason) {
  const Event moved =
      StateChangeEvent(T(), kJob, JobState::kRunning, JobState::kStopping, "crash on node-b: x");
  ExpectHeader(moved, EventKind::kStateChange);
  EXPECT_EQ(moved.message, "running -> stopping: crash on node-b: x");
  EXPECT_TRUE(moved.figures.empty());

  const Event resumed = ResumeEvent(T(), kJob, JobState::kHeld, "restart limit reached");
  ExpectHeader(resumed, EventKind::kResume);
  EXPECT_EQ(resumed.message, "resumed by an operator from held (restart limit reached)");
}

TEST(LifecycleEventTest, ARestartNamesItsGenerationAndTheNodesLeftOut) {
  const Event e = RestartEvent(T(), kJob, {"n1", "n2"}, {{"n9", "n4"}, {"n5"}, {}, {}, ""},
                               "stall: no rank advanced");

  ExpectHeader(e, EventKind::kRestart);
  EXPECT_EQ(e.message, "generation 3 started on 2 nodes (n1, n2); without n4, n9 (quarantined), "
                       "n5 (unreachable); after: stall: no rank advanced");
  EXPECT_THAT(e.figures, ElementsAre(Pair("nodes", 2), Pair("nodes_left_out", 3)));

  std::vector<std::string> many;
  for (int i = 0; i < 9; ++i) many.push_back(absl::StrCat("m", i));
  EXPECT_EQ(RestartEvent(T(), kJob, many, {{}, {}, {"x"}, {}, ""}, "c").message,
            "generation 3 started on 9 nodes; without x (not heard); after: c");
}

TEST(LifecycleEventTest, ARestartNamesTheNodeAVerdictLeftOutOrWhyItIsKept) {
  const Event e = RestartEvent(T(), kJob, {"n1"}, {{}, {}, {}, {"n2"}, ""}, "crash");
  EXPECT_EQ(e.message, "generation 3 started on 1 node (n1); without n2 (left out: restart "
                       "elsewhere); after: crash");
  EXPECT_THAT(e.figures, ElementsAre(Pair("nodes", 1), Pair("nodes_left_out", 1),
                                     Pair("nodes_elsewhere", 1)));

  const Event kept = RestartEvent(T(), kJob, {"n1", "n2"}, {{}, {}, {}, {}, "n2 kept: why"}, "c");
  EXPECT_EQ(kept.message, "generation 3 started on 2 nodes (n1, n2); n2 kept: why; after: c");
  EXPECT_THAT(kept.figures, ElementsAre(Pair("nodes", 2), Pair("nodes_left_out", 0)));
}

TEST(LifecycleEventTest, RecoveredSaysWhereTheTimeWent) {
  RecoveryFigures f;
  f.detect = absl::Seconds(2.5);
  f.stop = absl::Seconds(1);
  f.backoff = absl::Seconds(5);
  f.relaunch = absl::Seconds(4);
  f.first_step = absl::Seconds(3);
  f.total = absl::Seconds(15.5);

  const Event e = RecoveredEvent(T(), kJob, f);

  ExpectHeader(e, EventKind::kRecovered);
  EXPECT_EQ(e.message, "first step of generation 3 15.5s after the failure: detect 2.5s, stop "
                       "1.0s, backoff 5.0s, relaunch 4.0s, first step 3.0s");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("detect_seconds", 2.5), Pair("stop_seconds", 1),
                          Pair("backoff_seconds", 5), Pair("relaunch_seconds", 4),
                          Pair("first_step_seconds", 3), Pair("total_seconds", 15.5)));
}

TEST(LifecycleEventTest, AWorldSizeChangeWithAndWithoutTheBatch) {
  const Event e = WorldSizeChangedEvent(T(), kJob, 8, 6, 256, 192);
  ExpectHeader(e, EventKind::kWorldSizeChanged);
  EXPECT_EQ(e.message, "world size 8 -> 6: global batch 256 -> 192 samples (x0.75); the learning "
                       "rate the config names was tuned for the old batch");
  EXPECT_THAT(e.figures, ElementsAre(Pair("old_world_size", 8), Pair("new_world_size", 6),
                                     Pair("old_global_batch", 256), Pair("new_global_batch", 192)));

  EXPECT_EQ(WorldSizeChangedEvent(T(), kJob, 8, 6, 0, 0).message,
            "world size 8 -> 6: the global batch changes with it unless the script rescales "
            "(report samples= in hb.step to see by how much)");
}

TEST(LifecycleEventTest, WhereAGenerationMeetsAndWhetherItMoved) {
  RendezvousDecision d;
  d.generation = 3;
  d.host = "node-a";
  d.address = "10.0.0.1";
  d.port = 41234;
  d.ranks = {"node-a", "node-c"};
  d.previous_host = "node-b";
  const Event e = RendezvousEvent(T(), kJob, d);
  ExpectHeader(e, EventKind::kRendezvous);
  EXPECT_EQ(e.node, "node-a");
  EXPECT_EQ(e.message, "generation 3 meets on node-a (10.0.0.1:41234), moved from node-b");
  EXPECT_THAT(e.figures, ElementsAre(Pair("port", 41234), Pair("nodes", 2), Pair("moved", 1)));

  // Static ranks numbered afresh are listed; a host that stays did not move.
  d.kind = RendezvousKind::kStatic;
  d.renumbered = true;
  d.previous_host = "node-a";
  const Event s = RendezvousEvent(T(), kJob, d);
  EXPECT_EQ(s.message, "generation 3 meets on node-a (10.0.0.1:41234); node ranks node-a=0, "
                       "node-c=1");
  EXPECT_THAT(s.figures, ElementsAre(Pair("port", 41234), Pair("nodes", 2), Pair("moved", 0)));
}

TEST(LifecycleEventTest, AStartTimeoutSaysWhereTheGenerationWasToMeet) {
  RendezvousDecision d;
  d.host = "node-b";
  d.address = "10.0.0.2";
  d.port = 4002;
  const Event e = StartTimeoutEvent(T(), kJob, absl::Seconds(301), absl::Minutes(5), 2, &d);
  ExpectHeader(e, EventKind::kStartTimeout);
  EXPECT_EQ(e.node, "");
  EXPECT_EQ(e.message, "generation 3 made no first step within 300.0s (started 301.0s ago; no "
                       "rank reported on the 2 nodes running it): its rendezvous on node-b "
                       "(10.0.0.2:4002) did not complete, or its ranks did not start");
  EXPECT_THAT(e.figures, ElementsAre(Pair("waited_seconds", 301), Pair("timeout_seconds", 300),
                                     Pair("nodes_running", 2)));
  EXPECT_THAT(StartTimeoutEvent(T(), kJob, absl::Seconds(61), absl::Seconds(60), 1, nullptr)
                  .message,
              ::testing::HasSubstr("): its rendezvous did not complete"));
}

TEST(LifecycleEventTest, AFallbackNamesTheSuspectCheckpointAndWhereTheNextGenerationResumes) {
  FallbackDecision d;
  d.kind = FallbackDecision::Kind::kFallBack;
  d.checkpoint = 39;
  d.advice.limit = 38;
  d.resume_at = 29;
  d.rollbacks = 1;
  d.cap = 2;
  d.reason = "why";
  const Event suspect = CheckpointSuspectEvent(T(), kJob, d);
  ExpectHeader(suspect, EventKind::kCheckpointSuspect);
  EXPECT_EQ(suspect.message, "checkpoint step 39 is suspect: why");
  const Event fallback = CheckpointFallbackEvent(T(), kJob, d);
  ExpectHeader(fallback, EventKind::kCheckpointFallback);
  EXPECT_EQ(fallback.message, "falling back from checkpoint step 39: generation 4 loads the "
                              "newest checkpoint at or below step 38 (step 29)");
  EXPECT_THAT(fallback.figures, ElementsAre(Pair("checkpoint", 39), Pair("rollbacks", 1),
                                            Pair("cap", 2), Pair("resume_limit", 38),
                                            Pair("resume_at", 29)));
  d.kind = FallbackDecision::Kind::kRollBack;
  d.advice.skip_first = 30;
  d.advice.skip_last = 45;
  const Event rollback = SpikeRollbackEvent(T(), kJob, d);
  ExpectHeader(rollback, EventKind::kSpikeRollback);
  EXPECT_EQ(rollback.message, "why");
  EXPECT_THAT(rollback.figures, ::testing::Contains(Pair("skip_last", 45)));
  EXPECT_EQ(FallbackHold(d).reason, "why");
}

TEST(LifecycleEventTest, AHoldAtTheRestartCapCarriesTheCap) {
  const HoldCause cause = RestartLimitHold(4, absl::Hours(2), 4, "crash on node-a: boom");
  EXPECT_EQ(cause.reason, "restart limit reached: 4 restarts within 2h (--restart-limit 4); last "
                          "failure: crash on node-a: boom");

  const Event e = HoldEvent(T(), kJob, cause);

  ExpectHeader(e, EventKind::kHold);
  EXPECT_EQ(e.message, cause.reason + ". `trainsupctl resume train-7` lifts it");
  EXPECT_THAT(e.figures, ElementsAre(Pair("restarts_in_window", 4),
                                     Pair("window_seconds", 7200), Pair("restart_limit", 4)));

  const Event workload = HoldEvent(T(), kJob, WorkloadHold("the same ValueError: x"));
  EXPECT_EQ(workload.message, "the same ValueError: x. `trainsupctl resume train-7` lifts it");
  EXPECT_THAT(workload.figures, ElementsAre(Pair("workload_repeat", 1)));
}

// ---- Nodes ----

TEST(NodeEventTest, QuarantineAndItsLifting) {
  const Event q = QuarantineEvent(T(), kJob, "node-a", "policy", "3 failures within 1h: a; b; c",
                                  FailureCount{3, absl::Hours(1)});
  ExpectHeader(q, EventKind::kQuarantine);
  EXPECT_EQ(q.node, "node-a");
  EXPECT_EQ(q.message, "node node-a quarantined by policy: 3 failures within 1h: a; b; c");
  EXPECT_THAT(q.figures, ElementsAre(Pair("failures", 3), Pair("window_seconds", 3600)));

  const Event by_hand = QuarantineEvent(T(), kJob, "node-b", "operator", "bad GPU 3");
  EXPECT_EQ(by_hand.message, "node node-b quarantined by operator: bad GPU 3");
  EXPECT_TRUE(by_hand.figures.empty());

  const Event u = UnquarantineEvent(T(), EventJob(), "node-a");
  EXPECT_EQ(u.kind, EventKind::kUnquarantine);
  EXPECT_EQ(u.job, "");
  EXPECT_EQ(u.node, "node-a");
  EXPECT_EQ(u.message, "node node-a unquarantined by an operator");
}

TEST(NodeEventTest, AQuarantineTheCapRefusedCarriesTheCap) {
  const Event e = QuarantineSkippedEvent(T(), kJob, "node-d", "3 failures within 1h: x",
                                         FailureCount{3, absl::Hours(1)}, 2, 0.25, 8);

  ExpectHeader(e, EventKind::kQuarantineSkipped);
  EXPECT_EQ(e.node, "node-d");
  EXPECT_EQ(e.message, "node node-d qualifies for quarantine (3 failures within 1h: x) but 2 nodes "
                       "are quarantined already, the most --quarantine-max-fraction 0.25 of 8 "
                       "allows");
  EXPECT_THAT(e.figures, ElementsAre(Pair("failures", 3), Pair("window_seconds", 3600),
                                     Pair("quarantined_nodes", 2), Pair("max_fraction", 0.25),
                                     Pair("nodes", 8)));
}

TEST(NodeEventTest, FenceAndUnfenceByTheirAction) {
  const Event fenced =
      FenceEvent(T(), kJob, FenceAction::kFence, "n2", true, "exit code 0; output: drained");
  ExpectHeader(fenced, EventKind::kFence);
  EXPECT_EQ(fenced.node, "n2");
  EXPECT_EQ(fenced.message, "fence command for n2 succeeded: exit code 0; output: drained");
  EXPECT_THAT(fenced.figures, ElementsAre(Pair("ok", 1)));

  const Event failed = FenceEvent(T(), kJob, FenceAction::kUnfence, "n2", false, "exit code 1");
  EXPECT_EQ(failed.kind, EventKind::kUnfence);
  EXPECT_EQ(failed.message, "unfence command for n2 FAILED: exit code 1");
  EXPECT_THAT(failed.figures, ElementsAre(Pair("ok", 0)));
}

TEST(NodeEventTest, APersistFailureQuotesWhatFailed) {
  const Event e = PersistFailedEvent(T(), kJob, "n3", "the state store refused: disk full");
  ExpectHeader(e, EventKind::kPersistFailed);
  EXPECT_EQ(e.node, "n3");
  EXPECT_EQ(e.message, "the state store refused: disk full");
  EXPECT_TRUE(e.figures.empty());
}

TEST(LeadershipEventTest, SaysTheRoleTheEpochAndWhyAboutNoJob) {
  const Event led = LeadershipEvent(T(), "leader", 42, "won the election (epoch 42)");
  EXPECT_EQ(led.kind, EventKind::kLeadership);
  EXPECT_EQ(led.time, T());
  EXPECT_EQ(led.job, "");
  EXPECT_EQ(led.generation, 0u);
  EXPECT_EQ(led.message, "leader (epoch 42): won the election (epoch 42)");
  EXPECT_THAT(led.figures, ElementsAre(Pair("epoch", 42)));
  EXPECT_EQ(LeadershipEvent(T(), "standby", 0, "the lease expired").message,
            "standby: the lease expired");
}

// ---- Checkpoint plans ----

TEST(PlanEventTest, APeriodicPlanCarriesWhatItIsBasedOn) {
  PlanBasis basis;
  basis.interval_seconds = 1633;
  basis.checkpoint_seconds = 18;
  basis.checkpoint_measured = true;
  basis.mtbf_seconds = 22200;
  basis.failures = 2;
  basis.exposure_seconds = 7200;
  basis.restart_seconds = 45;
  basis.restart_measured = false;
  basis.expected_waste_fraction = 0.0234;

  const Event e = CheckpointPlanEvent(T(), kJob, PeriodicPlan(17, 400, 1200), basis);

  ExpectHeader(e, EventKind::kCheckpointPlan);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "");
  EXPECT_EQ(e.message, "checkpoint every 400 steps (27m13s) from step 1200: C=18s measured, "
                       "M=6h10m (conservative; 2 failures over 2h), R=45s prior; expected waste "
                       "2.3%");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("plan_id", 17), Pair("interval_steps", 400),
                          Pair("effective_from_step", 1200), Pair("interval_seconds", 1633),
                          Pair("mtbf_seconds", 22200), Pair("checkpoint_seconds", 18),
                          Pair("restart_seconds", 45), Pair("checkpoint_measured", 1),
                          Pair("restart_measured", 0), Pair("failures", 2),
                          Pair("exposure_seconds", 7200),
                          Pair("expected_waste_fraction", 0.0234)));

  basis.verdict = "this workload cannot run here";
  basis.warnings = {"w1", "w2"};
  EXPECT_THAT(CheckpointPlanEvent(T(), kJob, PeriodicPlan(17, 400, 1200), basis).message,
              ::testing::EndsWith("; expected waste 2.3%; this workload cannot run here; w1; w2"));
}

TEST(PlanEventTest, ARevokedPlanNamesTheNodeThatMissedIt) {
  const Event e = PlanRevokedEvent(T(), kJob, PeriodicPlan(19, 300, 950), 18, "node-b", 6);

  ExpectHeader(e, EventKind::kCheckpointPlan);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message, "plan 18 revoked: node node-b did not hold it 6 steps before its first step "
                       "950; the schedule before it (every 300 steps) stays in force");
  EXPECT_THAT(e.figures, ElementsAre(Pair("plan_id", 19), Pair("interval_steps", 300),
                                     Pair("effective_from_step", 950),
                                     Pair("revoked_plan_id", 18), Pair("guard_steps", 6)));
}

TEST(PlanEventTest, AnOperatorsCheckpointNamesItsStep) {
  CheckpointPlanSpec plan = PeriodicPlan(21, 400, 1200);
  plan.one_off_steps = {1333};

  const Event e = CheckpointRequestedEvent(T(), kJob, plan, 41.6);

  ExpectHeader(e, EventKind::kCheckpointPlan);
  EXPECT_EQ(e.message, "checkpoint requested by an operator at step 1333 (in about 42s)");
  EXPECT_THAT(e.figures, ElementsAre(Pair("plan_id", 21), Pair("interval_steps", 400),
                                     Pair("effective_from_step", 1200), Pair("one_off_step", 1333),
                                     Pair("ahead_seconds", 41.6)));
}

// ---- Training signals ----

TEST(SignalEventTest, ANonFiniteLossNamesItsFirstRankAndWhatIsDone) {
  NonFiniteFinding f;
  f.step = f.first_step = 57;
  f.ranks = {{3, 1}, {6, 2}};
  f.ranks_at_step = 2;
  f.value = std::nan("");

  Event e = NotFiniteEvent(T(), kJob, f, {"node-b", "node-c"}, /*restart=*/true, std::nullopt);
  ExpectHeader(e, EventKind::kNotFinite);
  EXPECT_EQ(e.rank, 3u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "loss NaN at step 57 on 2 ranks, first rank 3 on node-b; generation 3 is stopped on "
            "every node and restarted from its last checkpoint");
  EXPECT_THAT(e.figures, ElementsAre(Pair("step", 57), Pair("first_step", 57), Pair("ranks", 2),
                                     Pair("grad_norm", 0), Pair("restart", 1),
                                     Pair("workload_repeat", 0)));

  e = NotFiniteEvent(T(), kJob, f, {"node-b"}, true, std::string("the same non-finite loss"));
  EXPECT_EQ(e.message,
            "loss NaN at step 57 on 2 ranks, first rank 3 on node-b; the job is held: the same "
            "non-finite loss");
  EXPECT_THAT(e.figures[4], Pair("restart", 0));
  EXPECT_THAT(e.figures[5], Pair("workload_repeat", 1));
}

TEST(SignalEventTest, AGradNormNonFiniteTooLongSaysForHowMany) {
  NonFiniteFinding f;
  f.grad_norm = true;
  f.first_step = 100;
  f.step = 119;
  f.consecutive_steps = 20;
  f.ranks = {{0, 0}};
  f.ranks_at_step = 8;
  const Event e = NotFiniteEvent(T(), kJob, f, {"node-a"}, false, std::nullopt);
  EXPECT_EQ(e.message,
            "gradient norm non-finite at every step from 100 to 119 (20 in a row, beyond fp16 "
            "overflow steps) with finite losses, first rank 0 on node-a; reported only, not "
            "acted on");
  EXPECT_THAT(e.figures.back(), Pair("consecutive_steps", 20));
}

TEST(SignalEventTest, ALossShiftStatesItsThresholdAndBaseline) {
  LossShiftFinding f;
  f.step = 419;
  f.onset_step = 400;
  f.recent_min = 2.43;
  f.baseline_level = 2.01;
  f.baseline_slope = -0.0012;
  f.baseline_sigma = 0.021;
  f.threshold = 2.136;
  const Event e = LossShiftEvent(T(), kJob, f, LossShiftOptions());
  ExpectHeader(e, EventKind::kLossShift);
  EXPECT_EQ(e.rank, std::nullopt);  // the job's loss, every rank's
  EXPECT_EQ(e.message,
            "loss shifted up since step 400: at step 419 the least loss of the last 20 steps, "
            "2.43, is above 2.136 (the level 2.01 the 128 steps before had reached, their trend "
            "-0.0012 a step, + max(0.05, 6 x sigma 0.021 about the trend))");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("step", 419), Pair("onset_step", 400), Pair("recent_min", 2.43),
                          Pair("threshold", 2.136), Pair("baseline_level", 2.01),
                          Pair("baseline_slope", -0.0012), Pair("baseline_sigma", 0.021),
                          Pair("window_steps", 20),
                          Pair("baseline_steps", 128), Pair("floor", 0.05), Pair("sigmas", 6)));
}

TEST(SignalEventTest, ResumeFindingsStateTheirStepsAndValues) {
  ResumeBehindFinding behind{600, 599, 799, 200};
  Event e = ResumedBehindEvent(T(), kJob, behind);
  ExpectHeader(e, EventKind::kResumedBehind);
  EXPECT_EQ(e.message,
            "resumed after step 599, behind the last checkpoint seen complete (step 799): 200 "
            "steps done again for nothing (booked lost); did it load an older checkpoint, or "
            "none?");
  EXPECT_THAT(e.figures, ElementsAre(Pair("first_step", 600), Pair("resumed_step", 599),
                                     Pair("checkpoint_step", 799), Pair("repeated_steps", 200)));

  LrMismatchFinding lr{800, 1.5e-4, 3e-4, 1.0, 8, 8, 807};
  e = LrMismatchEvent(T(), kJob, lr, ResumeOptions());
  ExpectHeader(e, EventKind::kLrMismatch);
  EXPECT_EQ(e.message,
            "learning rate at step 800 is 0.0003, it was 0.00015 at that step before the restart "
            "(100.0% off; 8 of 8 steps compared differ by more than 0.1%): the LR scheduler's "
            "state did not restore");
  EXPECT_THAT(e.figures.front(), Pair("step", 800));
  EXPECT_THAT(e.figures[6], Pair("judged_step", 807));
  EXPECT_THAT(e.figures.back(), Pair("tolerance", 1e-3));

  DataPositionFinding data{800, 64, 64, 131000, 130500, 8, 7, 807};
  e = DataPositionMismatchEvent(T(), kJob, data, ResumeOptions());
  ExpectHeader(e, EventKind::kDataPositionMismatch);
  EXPECT_THAT(e.figures[3], Pair("tokens_before", 131000));
  EXPECT_THAT(e.figures[4], Pair("tokens_after", 130500));
  EXPECT_THAT(e.figures[6], Pair("differing_steps", 7));

  ResumeSpikeFinding spike;
  spike.generation = 2;
  spike.resumed_step = 399;
  spike.first_step = 400;
  spike.step = 407;
  spike.peak_step = 402;
  spike.peak_excess = 1.4;
  spike.loss_before = 2.1;
  spike.loss_after = 3.3;
  spike.excess = 1.2;
  spike.sigma = 0.02;
  spike.threshold = 0.12;
  spike.compared = 8;
  e = ResumeSpikeEvent(T(), kJob, spike, ResumeOptions());
  ExpectHeader(e, EventKind::kResumeSpike);
  EXPECT_EQ(e.message,
            "loss after resuming from step 399 is 3.3 over steps 400-407, it was 2.1 at those "
            "steps before the restart: a median rise of 1.2, above 0.12 (max(0.05, 6 x sigma "
            "0.02)); the checkpoint may be incomplete (optimizer state, RNG, data position)");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("resumed_step", 399), Pair("first_step", 400), Pair("step", 407),
                          Pair("peak_step", 402), Pair("peak_excess", 1.4),
                          Pair("loss_before", 2.1), Pair("loss_after", 3.3), Pair("excess", 1.2),
                          Pair("sigma", 0.02), Pair("threshold", 0.12),
                          Pair("compared_steps", 8)));
}

TEST(SignalEventTest, AFlatLossStatesItsDrop) {
  LossFlatFinding f;
  f.first_step = 0;
  f.step = 199;
  f.first_loss = 10.82;
  f.last_loss = 10.79;
  f.drop = 0.00277;
  f.steps = 200;
  const Event e = LossFlatEvent(T(), kJob, f, 0.01);
  ExpectHeader(e, EventKind::kLossFlat);
  EXPECT_EQ(e.message,
            "loss flat from the start: over steps 0-199 its mean went from 10.82 (first 50 "
            "steps) to 10.79 (last 50), a drop of 0.3% where at least 1.0% was expected; is the "
            "model learning (learning rate, frozen parameters, labels)?");
  EXPECT_THAT(e.figures.back(), Pair("quarter_steps", 50));
}

TEST(SignalEventTest, GradNormSpikeAndCollapseNameTheLargestRank) {
  GradNormFinding f;
  f.step = f.first_step = 812;
  f.grad_norm = 45.2;
  f.baseline_median = 1.96;
  f.ratio = 23.06;
  f.at = {5, 1};
  Event e = GradNormEvent(T(), kJob, f, "node-b");
  ExpectHeader(e, EventKind::kGradSpike);
  EXPECT_EQ(e.rank, 5u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "gradient norm spike at step 812: 45.2, x23.1 the baseline median 1.96; largest on "
            "rank 5 on node-b (a loss spike often follows)");
  f.collapse = true;
  f.first_step = 793;
  f.grad_norm = 1e-7;
  f.ratio = 5.1e-8;
  f.steps = 20;
  e = GradNormEvent(T(), kJob, f, "node-b");
  EXPECT_EQ(e.kind, EventKind::kGradCollapse);
  EXPECT_EQ(e.message,
            "gradient norm collapsed: 20 steps in a row (steps 793-812) at about 0, 1e-07 at "
            "step 812 against a baseline median of 1.96 (x5.1e-08); largest on rank 5 on node-b");
  EXPECT_THAT(e.figures, ElementsAre(Pair("step", 812), Pair("grad_norm", 1e-7),
                                     Pair("baseline_median", 1.96), Pair("ratio", 5.1e-8),
                                     Pair("first_step", 793), Pair("steps", 20)));
}

ThroughputFinding Moved(double before, double after, bool decay = false) {
  ThroughputFinding f;
  f.decay = decay;
  f.onset_step = 150;
  f.step = 240;
  f.before_s = before;
  f.after_s = after;
  f.ratio = after / before;
  f.steps = 91;
  f.held = absl::Seconds(65);
  return f;
}

TEST(SignalEventTest, AThroughputChangeOfTheJobNamesTheNodeThatMovedAlone) {
  ThroughputSignal s{true, 1, Moved(0.11, 0.134), Moved(0.05, 0.061), 1};
  Event e = ThroughputEvent(T(), kJob, s, "node-b");
  ExpectHeader(e, EventKind::kThroughputChange);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.message,
            "step time slowed: 0.11s -> 0.134s (x1.22) since step 150, held 91 steps (1m5s); the "
            "compute time of node node-b alone moved with it: 0.05s -> 0.061s (x1.22)");
  EXPECT_THAT(e.figures,
              ElementsAre(Pair("step", 240), Pair("onset_step", 150), Pair("before_seconds", 0.11),
                          Pair("after_seconds", 0.134), Pair("ratio", 0.134 / 0.11),
                          Pair("steps", 91), Pair("held_seconds", 65), Pair("job_step_time", 1),
                          Pair("nodes_moving", 1), Pair("node_before_seconds", 0.05),
                          Pair("node_after_seconds", 0.061), Pair("node_ratio", 0.061 / 0.05)));

  e = ThroughputEvent(T(), kJob, {true, kNoNode, Moved(0.11, 0.15, true), std::nullopt, 3}, "");
  EXPECT_EQ(e.kind, EventKind::kThroughputDecay);
  EXPECT_EQ(e.node, "");
  EXPECT_EQ(e.message,
            "step time drifted slower: 0.11s -> 0.15s (x1.36) since step 150, held 91 steps "
            "(1m5s); the compute times of 3 nodes moved together");

  e = ThroughputEvent(T(), kJob, {false, 2, Moved(0.05, 0.06), std::nullopt, 1}, "node-c");
  EXPECT_EQ(e.message,
            "compute time of node node-c slowed: 0.05s -> 0.06s (x1.20) since step 150, held 91 "
            "steps (1m5s); the job's other nodes did not move with it");
  EXPECT_THAT(e.figures[7], Pair("job_step_time", 0));
}

TEST(SignalEventTest, MemoryGrowthStatesItsSlopeAndTheTimeToTheLimit) {
  MemoryGrowthFinding f;
  f.step = 249;
  f.steps = 200;
  f.bytes = 32.0 * (1 << 30);
  f.at = {2, 0};
  f.growth_bytes = 150.0 * (1 << 20);
  f.slope_bytes_per_step = 1.0 * (1 << 20);
  f.slope_bytes_per_second = 2.0 * (1 << 20);
  f.capacity_bytes = 80.0 * (1 << 30);
  f.seconds_to_limit = 24576;
  Event e = MemoryGrowthEvent(T(), kJob, f, "node-a");
  ExpectHeader(e, EventKind::kMemoryGrowth);
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.node, "node-a");
  EXPECT_EQ(e.message,
            "device memory of rank 2 on node-a grew 150 MiB over 200 steps to 32 GiB at step 249: "
            "1 MiB per step (2 MiB/s); at that rate it reaches the device's 80 GiB in 6h49m36s");
  EXPECT_THAT(e.figures.back(), Pair("seconds_to_limit", 24576));
  f.host = true;
  f.capacity_bytes = f.seconds_to_limit = 0;
  e = MemoryGrowthEvent(T(), kJob, f, "node-a");
  EXPECT_EQ(e.message,
            "host memory (RSS) of rank 2 on node-a grew 150 MiB over 200 steps to 32 GiB at step "
            "249: 1 MiB per step (2 MiB/s)");
  EXPECT_THAT(e.figures.back(), Pair("slope_bytes_per_second", 2.0 * (1 << 20)));
}

TEST(SignalEventTest, AReplicaMismatchNamesItsRankAndWhetherItIsCharged) {
  ReplicaFinding f;
  f.step = 40;
  f.group = 0;
  f.group_ranks = 4;
  f.majority = 3;
  f.disagreeing = 1;
  f.at = {2, 1};
  f.on_node = 1;
  Event e = ReplicaMismatchEvent(T(), kJob, f, "node-b", /*charged=*/true);
  ExpectHeader(e, EventKind::kReplicaMismatch);
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(e.message,
            "rank 2 on node-b disagrees with its replica group 0 at step 40: 3 of its 4 ranks "
            "agree, 1 do not (1 named on node-b); silent data corruption?; counted against "
            "node-b toward its quarantine");
  EXPECT_THAT(e.figures, ElementsAre(Pair("step", 40), Pair("group", 0), Pair("group_ranks", 4),
                                     Pair("majority", 3), Pair("disagreeing", 1),
                                     Pair("on_node", 1), Pair("no_majority", 0),
                                     Pair("charged", 1)));
  f.no_majority = true;
  f.group_ranks = 2;
  f.majority = 1;
  e = ReplicaMismatchEvent(T(), kJob, f, "", false);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.message,
            "replica group 0 has no majority at step 40: its 2 ranks sent different digests (at "
            "most 1 agree); no rank can be named");
}

}  // namespace
}  // namespace trainsup
