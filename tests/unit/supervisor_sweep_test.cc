// Supervisor::Sweep driven through Hello/Report as the agents' adapter does:
// the detectors' events (stall, crash, straggler) and what a new generation
// does to them. The supervisor also emits lifecycle events (state changes,
// restarts); these tests look at the detectors' kinds only, except where a
// restart is the point.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

using ::trainsup::testing::AtMs;
using ::trainsup::testing::AtS;

bool IsDetection(EventKind kind) {
  return kind == EventKind::kStall ||
         kind == EventKind::kCrash || kind == EventKind::kStraggler ||
         kind == EventKind::kStragglerCleared;
}

// The events the detectors emitted, in order.
std::vector<Event> Detections(const std::vector<Event>& events) {
  std::vector<Event> out;
  for (const Event& e : events) {
    if (IsDetection(e.kind)) out.push_back(e);
  }
  return out;
}

// Compute seconds of `rank` at `step` (nullopt: not bracketed).
using ComputeFn = std::function<std::optional<double>(uint32_t rank, int64_t step)>;

std::optional<double> NoCompute(uint32_t, int64_t) { return std::nullopt; }

// Two agents, node-a (ranks 0, 1) and node-b (ranks 2, 3), of job "job",
// connected at T0 as fresh agents and running the generation the supervisor
// gave them.
class SweepTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    fixed_incarnation_ = 1;  // the agents never restart
    Create();
    ConnectAgents(AtS(0));
  }

  // Every rank completes `step` (duration 1s); each node reports its ranks
  // alive.
  void StepAll(absl::Time now, int64_t step, const ComputeFn& compute = NoCompute) {
    for (SessionId session : {a_, b_}) {
      std::vector<Heartbeat> hbs;
      std::vector<RankProcessInfo> processes;
      for (uint32_t r : RanksOf(session)) {
        Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
        hb.step_duration_s = 1.0;
        hb.compute_s = compute(r, step);
        hbs.push_back(hb);
        processes.push_back(Alive(r));
      }
      Send(now, session, hbs, processes);
    }
  }

  // Steps 1..n at `start` + 1s .. `start` + n s.
  void RunSteps(int64_t n, absl::Time start = AtS(0)) {
    for (int64_t s = 1; s <= n; ++s) StepAll(start + absl::Seconds(s), s);
  }

  // Ranks 0, 1 and 3 finish computing step `next`; rank 2 is still in it.
  void HangOnRank2(absl::Time now, int64_t next) {
    std::vector<Heartbeat> a;
    for (uint32_t r : {0u, 1u}) {
      a.push_back(Hb(HeartbeatKind::kComputeBegin, r, next));
      a.push_back(Hb(HeartbeatKind::kComputeEnd, r, next));
    }
    Send(now, a_, a, {Alive(0), Alive(1)});
    Send(now, b_,
         {Hb(HeartbeatKind::kComputeBegin, 2, next), Hb(HeartbeatKind::kComputeBegin, 3, next),
          Hb(HeartbeatKind::kComputeEnd, 3, next)},
         {Alive(2), Alive(3)});
  }

  // The agents obey the stop the supervisor sent; after the backoff the
  // supervisor starts the next generation, and the agents launch it.
  void StopAndRestart(absl::Time now) {
    SendLauncherExit(now, a_, 0, /*signal=*/15);
    SendLauncherExit(now, b_, 0, /*signal=*/15);
    Sweep(now);                      // every node stopped: restarting
    Sweep(now + absl::Seconds(5));   // the backoff: the next generation
    ASSERT_EQ(job().generation(), gen_ + 1);
    gen_ = job().generation();
  }
};

// ---------------------------------------------------------------------------
// Stall

TEST_F(SweepTest, HangIsOneStallEventNamingTheCulpritRankAndNode) {
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);

  // Silent exactly the 20s threshold: not yet.
  EXPECT_TRUE(Detections(Sweep(AtS(30))).empty());
  std::vector<Event> events = Detections(Sweep(AtMs(30500)));

  ASSERT_EQ(events.size(), 1u);
  const Event& e = events[0];
  EXPECT_EQ(e.kind, EventKind::kStall);
  EXPECT_EQ(e.job, "job");
  EXPECT_EQ(e.generation, gen_);
  EXPECT_EQ(e.time, AtMs(30500));
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(Figure(e, "threshold_seconds"), 20.0);
  EXPECT_EQ(Figure(e, "silent_seconds"), 20.5);
  EXPECT_EQ(Figure(e, "step"), 10.0);
  EXPECT_EQ(Figure(e, "behind_step"), 10.0);  // computing step 11 while the others wait
  EXPECT_EQ(Figure(e, "behind_ranks"), 1.0);
  EXPECT_TRUE(entry().verdicts().stalled);
  EXPECT_EQ(entry().verdicts().stall_culprit, 2u);
  EXPECT_EQ(entry().event_count(EventKind::kStall), 1u);
}

// One rank's flight record (common/collective_record.h): it enqueued the
// default group's all-reduces up to `enqueued` and completed `completed`.
FlightRecord AllReducesUpTo(int64_t enqueued, int64_t completed) {
  FlightRecord record;
  record.version = "2.10";
  GroupRecord group;
  group.pg_id = 0;
  group.name = "0";
  group.desc = "default_pg";
  group.ranks = {0, 1, 2, 3};
  group.collectives = {enqueued, -1, completed};
  CollectiveOp op;
  op.seq = enqueued;
  op.op = "all_reduce";
  op.state = enqueued > completed ? CollectiveState::kScheduled : CollectiveState::kCompleted;
  group.last_collectives = {op};
  record.groups = {group};
  return record;
}

StacksInfo StacksWithRecords(uint64_t generation, std::vector<uint32_t> ranks,
                             const std::map<uint32_t, FlightRecord>& records) {
  StacksInfo info;
  info.generation = generation;
  for (uint32_t rank : ranks) {
    RankStackInfo stack;
    stack.rank = rank;
    stack.answered = true;
    stack.text = "Thread 0x1 (most recent call first):\n  File \"train.py\", line 1 in main\n";
    if (auto it = records.find(rank); it != records.end()) stack.flight_record = it->second;
    info.stacks.push_back(stack);
  }
  return info;
}

TEST_F(SweepTest, AHangsStacksCarryTheRankNcclsFlightRecorderNames) {
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);
  ASSERT_FALSE(Detections(Sweep(AtMs(30500))).empty());
  // Ranks 0, 1 and 3 enqueued all-reduce #7 and wait in it; rank 2 never
  // called it (its dump stops at #6).
  const std::map<uint32_t, FlightRecord> records = {{0, AllReducesUpTo(7, 6)},
                                                     {1, AllReducesUpTo(7, 6)},
                                                     {2, AllReducesUpTo(6, 6)},
                                                     {3, AllReducesUpTo(7, 6)}};
  ASSERT_TRUE(sup_->Stacks(AtS(31), a_, StacksWithRecords(gen_, {0, 1}, records)).ok());
  ASSERT_TRUE(sup_->Stacks(AtS(31), b_, StacksWithRecords(gen_, {2, 3}, records)).ok());

  const absl::StatusOr<std::optional<StacksView>> view = sup_->StacksOf("job", 0);
  ASSERT_TRUE(view.ok() && view->has_value());
  const StacksView& stacks = **view;
  EXPECT_EQ(stacks.flight_records, 4u);
  EXPECT_EQ(stacks.collective.evidence, CulpritEvidence::kDump);
  EXPECT_THAT(stacks.collective.not_entered, ElementsAre(2u));
  EXPECT_EQ(stacks.collective.seq, 7);
  EXPECT_THAT(stacks.collective.text, HasSubstr("rank 2 never entered all_reduce #7 of pg 0"));
}

TEST_F(SweepTest, StacksWithoutFlightRecordsNameNoCollective) {
  // The negative control: gloo jobs (and torch without a recorder) send
  // stacks only.
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);
  ASSERT_FALSE(Detections(Sweep(AtMs(30500))).empty());
  StacksInfo info = StacksWithRecords(gen_, {0, 1}, {});
  info.stacks[1].flight_record_error = "a pickle that calls GLOBAL is not read";
  ASSERT_TRUE(sup_->Stacks(AtS(31), a_, info).ok());
  const absl::StatusOr<std::optional<StacksView>> view = sup_->StacksOf("job", 0);
  ASSERT_TRUE(view.ok() && view->has_value());
  EXPECT_EQ((*view)->flight_records, 0u);
  EXPECT_EQ((*view)->collective.evidence, CulpritEvidence::kNoDumps);
  EXPECT_THAT((*view)->unread_dumps,
              ElementsAre(std::make_pair(1u, "a pickle that calls GLOBAL is not read")));
}

TEST_F(SweepTest, AFlightRecordPastItsBoundsIsRefused) {
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);
  ASSERT_FALSE(Detections(Sweep(AtMs(30500))).empty());
  FlightRecord huge = AllReducesUpTo(7, 6);
  huge.groups.resize(kMaxFlightRecordGroupsReported + 1, huge.groups[0]);
  EXPECT_EQ(sup_->Stacks(AtS(31), a_, StacksWithRecords(gen_, {0}, {{0, huge}})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SweepTest, StallIsReportedOnceWhileItLasts) {
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);
  ASSERT_EQ(OfKind(Sweep(AtS(31)), EventKind::kStall).size(), 1u);

  // The agents keep reporting the processes alive; nothing advances.
  for (int64_t t : {32, 40, 50, 60}) {
    Send(AtS(t), a_, {}, {Alive(0), Alive(1)});
    Send(AtS(t), b_, {}, {Alive(2), Alive(3)});
    EXPECT_TRUE(Detections(Sweep(AtS(t))).empty()) << "at T0 + " << t << "s";
  }

  EXPECT_EQ(entry().event_count(EventKind::kStall), 1u);
  EXPECT_EQ(OfKind(sup_->events().Since(0, "job"), EventKind::kStall).size(), 1u);
  EXPECT_TRUE(entry().verdicts().stalled);
}

TEST_F(SweepTest, AllRanksWaitingAlikeIsAStallWithNoCulprit) {
  RunSteps(10);

  std::vector<Event> events = Detections(Sweep(AtS(31)));

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kStall);
  EXPECT_EQ(events[0].rank, std::nullopt);
  EXPECT_EQ(events[0].node, "");
  EXPECT_EQ(Figure(events[0], "seen_ranks"), 4.0);
  EXPECT_EQ(Figure(events[0], "behind_ranks"), 4.0);  // all at one place: undetermined
  EXPECT_EQ(entry().verdicts().stall_culprit, std::nullopt);
}

TEST_F(SweepTest, SlowButSteadyJobIsNotStalled) {
  // Steps of 5s: the threshold is 10 x 5s = 50s, not the 20s floor.
  for (int64_t s = 1; s <= 10; ++s) {
    std::vector<Heartbeat> a, b;
    for (uint32_t r : {0u, 1u}) {
      Heartbeat hb = Hb(HeartbeatKind::kStep, r, s);
      hb.step_duration_s = 5;
      a.push_back(hb);
    }
    for (uint32_t r : {2u, 3u}) {
      Heartbeat hb = Hb(HeartbeatKind::kStep, r, s);
      hb.step_duration_s = 5;
      b.push_back(hb);
    }
    Send(AtS(5 * s), a_, a, {Alive(0), Alive(1)});
    Send(AtS(5 * s), b_, b, {Alive(2), Alive(3)});
  }

  EXPECT_TRUE(Detections(Sweep(AtS(50 + 49))).empty());
  std::vector<Event> events = Detections(Sweep(AtS(50 + 51)));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(Figure(events[0], "threshold_seconds"), 50.0);
}

// ---------------------------------------------------------------------------
// Crash

TEST_F(SweepTest, CrashReportedByTwoAgentsNamesTheFirstRankToDieOnce) {
  RunSteps(5);
  // node-a's report comes first: rank 0 died 0.2s before T0 + 10s.
  Send(AtMs(10000), a_, {}, {Died(0, 0.2, /*exit_code=*/1), Alive(1)});
  // node-b's report comes 0.4s later: rank 2 raised, then died 1.0s before
  // it, i.e. 0.4s before rank 0.
  Heartbeat exception = Hb(HeartbeatKind::kException, 2, 5);
  exception.exception_type = "RuntimeError";
  exception.exception_message = "CUDA error: an illegal memory access was encountered";
  Send(AtMs(10400), b_, {exception}, {Died(2, 1.0, /*exit_code=*/1), Alive(3)});

  EXPECT_TRUE(Detections(Sweep(AtMs(10999))).empty());  // settling since T0 + 10s
  std::vector<Event> events = Detections(Sweep(AtMs(11000)));

  ASSERT_EQ(events.size(), 1u);
  const Event& e = events[0];
  EXPECT_EQ(e.kind, EventKind::kCrash);
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.node, "node-b");
  EXPECT_EQ(Figure(e, "exit_code"), 1.0);
  EXPECT_EQ(Figure(e, "signal"), 0.0);
  EXPECT_EQ(Figure(e, "failed_ranks"), 2.0);
  EXPECT_EQ(Figure(e, "victims"), 0.0);
  EXPECT_EQ(Figure(e, "ranks"), 4.0);
  EXPECT_EQ(Figure(e, "step"), 5.0);
  EXPECT_TRUE(entry().verdicts().crash_reported);
  EXPECT_EQ(entry().verdicts().crash_culprit, 2u);
}

TEST_F(SweepTest, CrashedJobIsReportedOnceAndNeverAsAStall) {
  RunSteps(5);
  Send(AtMs(10000), a_, {}, {Died(0, 0.2, 1), Alive(1)});
  Send(AtMs(10400), b_, {}, {Died(2, 1.0, 1), Alive(3)});
  ASSERT_EQ(Detections(Sweep(AtS(11))).size(), 1u);

  // The surviving ranks stay alive and silent far past the stall threshold.
  for (int64_t t : {12, 30, 50}) {
    Send(AtS(t), a_, {}, {Alive(1)});
    Send(AtS(t), b_, {}, {Alive(3)});
    EXPECT_TRUE(Detections(Sweep(AtS(t))).empty()) << "at T0 + " << t << "s";
  }

  EXPECT_EQ(entry().event_count(EventKind::kCrash), 1u);
  EXPECT_EQ(entry().event_count(EventKind::kStall), 0u);
  EXPECT_FALSE(entry().verdicts().stalled);
}

TEST_F(SweepTest, DeadRanksHoldOffTheStallRuleBeforeTheCrashSettles) {
  RunSteps(5);
  // The only death so far has an unknown exit status: no certain failure,
  // no crash; but a dead rank is not a hang either.
  RankProcessInfo vanished = Died(1, 0.1, 0);
  vanished.exit_known = false;
  Send(AtS(6), a_, {}, {Alive(0), vanished});

  EXPECT_TRUE(Detections(Sweep(AtS(7))).empty());
  EXPECT_TRUE(Detections(Sweep(AtS(100))).empty());
  EXPECT_EQ(entry().verdicts().failure_first_heard, absl::InfinitePast());
}

TEST_F(SweepTest, SettleClockStartsWhenTheSupervisorFirstHearsOfAFailure) {
  RunSteps(5);
  // The death is dated 5s back, but only heard of at T0 + 10s.
  Send(AtS(10), b_, {}, {Died(3, 5.0, 1), Alive(2)});

  EXPECT_TRUE(Detections(Sweep(AtMs(10500))).empty());
  std::vector<Event> events = Detections(Sweep(AtMs(11000)));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kCrash);
  EXPECT_EQ(events[0].rank, 3u);
}

TEST_F(SweepTest, RanksExitingZeroAreNoCrashAndNoStall) {
  RunSteps(5);
  Send(AtS(6), a_, {}, {Died(0, 0, 0), Died(1, 0, 0)});
  Send(AtS(6), b_, {}, {Died(2, 0, 0), Died(3, 0, 0)});

  EXPECT_TRUE(Detections(Sweep(AtS(7))).empty());
  EXPECT_TRUE(Detections(Sweep(AtS(1000))).empty());
  EXPECT_EQ(entry().verdicts().failure_first_heard, absl::InfinitePast());
  EXPECT_EQ(entry().event_count(EventKind::kCrash), 0u);
}

TEST_F(SweepTest, LauncherFailingBeforeAnyRankIsOneCrashNamingTheNode) {
  SendLauncherExit(AtS(5), a_, /*exit_code=*/2);

  EXPECT_TRUE(Detections(Sweep(AtMs(5999))).empty());
  std::vector<Event> events = Detections(Sweep(AtS(6)));

  ASSERT_EQ(events.size(), 1u);
  const Event& e = events[0];
  EXPECT_EQ(e.kind, EventKind::kCrash);
  EXPECT_EQ(e.rank, std::nullopt);
  EXPECT_EQ(e.node, "node-a");
  EXPECT_EQ(Figure(e, "exit_code"), 2.0);
  EXPECT_EQ(Figure(e, "signal"), 0.0);
  EXPECT_TRUE(Detections(Sweep(AtS(7))).empty());
  EXPECT_TRUE(Detections(Sweep(AtS(8))).empty());
  EXPECT_EQ(entry().event_count(EventKind::kCrash), 1u);
  EXPECT_EQ(entry().event_count(EventKind::kStall), 0u);
}

TEST_F(SweepTest, LauncherKilledBySignalIsNamedWithTheSignal) {
  SendLauncherExit(AtS(5), b_, 0, /*signal=*/9);

  std::vector<Event> events = Detections(Sweep(AtS(6)));

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].node, "node-b");
  EXPECT_EQ(Figure(events[0], "signal"), 9.0);
}

// A node that failed in an earlier generation and runs no part of the new
// one keeps its old launcher status: a launcher failure in the new
// generation is blamed on the node that runs it, with its own exit code.
TEST_F(SweepTest, LauncherCrashInANewGenerationNamesThatGenerationsNode) {
  SendLauncherExit(AtS(5), a_, /*exit_code=*/1);
  std::vector<Event> first = OfKind(Sweep(AtS(6)), EventKind::kCrash);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].node, "node-a");
  // node-a goes away; node-b obeys the stop; the next generation runs on
  // node-b alone.
  Disconnect(AtS(7), a_);
  SendLauncherExit(AtS(7), b_, 0, /*signal=*/15);
  Sweep(AtS(7));
  Sweep(AtS(12));
  ASSERT_EQ(job().generation(), gen_ + 1);
  gen_ = job().generation();
  Send(AtS(13), b_, {}, {});

  // The new generation's command fails on node-b.
  SendLauncherExit(AtS(20), b_, /*exit_code=*/3);
  std::vector<Event> second = OfKind(Sweep(AtS(21)), EventKind::kCrash);

  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].generation, gen_);
  EXPECT_EQ(second[0].node, "node-b");              // actual: "node-a"
  EXPECT_EQ(Figure(second[0], "exit_code"), 3.0);  // actual: 1
}

// ---------------------------------------------------------------------------
// Stragglers

TEST_F(SweepTest, StragglerIsOneEventAndLaterOneCleared) {
  // Rank 3 computes 3x longer than the others through step 30, then in line.
  ComputeFn compute = [](uint32_t rank, int64_t step) -> std::optional<double> {
    return rank == 3 && step <= 30 ? 0.3 : 0.1;
  };
  std::vector<std::pair<int64_t, Event>> seen;
  for (int64_t step = 0; step <= 100; ++step) {
    StepAll(AtS(step), step, compute);
    for (Event& e : Detections(Sweep(AtS(step)))) seen.emplace_back(step, std::move(e));
    if (step == 30) {
      EXPECT_THAT(entry().verdicts().straggler_ranks, ElementsAre(3u));
      const JobView view = *sup_->ViewOf("job", AtS(step));
      ASSERT_EQ(view.stragglers.size(), 1u);
      EXPECT_EQ(view.stragglers[0].rank, 3u);
      EXPECT_NEAR(view.stragglers[0].compute_p99_s, 0.3, 1e-6);
    }
  }

  // Armed at step 0; windows judged at 10, 20, 30 (flag), 40, 50, 60 (clear).
  ASSERT_EQ(seen.size(), 2u);
  const auto& [flag_step, flagged] = seen[0];
  EXPECT_EQ(flag_step, 30);
  EXPECT_EQ(flagged.kind, EventKind::kStraggler);
  EXPECT_EQ(flagged.rank, 3u);
  EXPECT_EQ(flagged.node, "node-b");
  ASSERT_TRUE(Figure(flagged, "rank_p99_seconds").has_value());
  EXPECT_NEAR(*Figure(flagged, "rank_p99_seconds"), 0.3, 1e-6);
  ASSERT_TRUE(Figure(flagged, "job_median_p99_seconds").has_value());
  EXPECT_NEAR(*Figure(flagged, "job_median_p99_seconds"), 0.1, 1e-6);
  EXPECT_EQ(Figure(flagged, "windows"), 3.0);

  const auto& [clear_step, cleared] = seen[1];
  EXPECT_EQ(clear_step, 60);
  EXPECT_EQ(cleared.kind, EventKind::kStragglerCleared);
  EXPECT_EQ(cleared.rank, 3u);
  EXPECT_EQ(cleared.node, "node-b");
  EXPECT_THAT(entry().verdicts().straggler_ranks, IsEmpty());
  EXPECT_EQ(entry().event_count(EventKind::kStraggler), 1u);
  EXPECT_EQ(entry().event_count(EventKind::kStragglerCleared), 1u);
  EXPECT_EQ(entry().event_count(EventKind::kStall), 0u);
}

// node-b's GPUs as its agent's health sources read them: GPU 0 runs ranks
// 2 and GPU 1 rank 3; `slowing` are GPU 1's clock event reasons.
GpuHealthInfo NodeBGpus(uint64_t slowing) {
  GpuHealthInfo report;
  report.generation = 1;
  report.source = "nvidia-smi";
  for (int32_t i = 0; i < 2; ++i) {
    GpuHealthSampleInfo g;
    g.index = i;
    g.uuid = absl::StrCat("GPU-", i);
    g.clock_event_reasons = i == 1 ? slowing : 0x1;  // GPU 0 idle between steps: no slowing
    g.local_ranks = {static_cast<uint32_t>(i)};
    g.ranks = {static_cast<uint32_t>(2 + i)};
    report.gpus.push_back(g);
  }
  return report;
}

TEST_F(SweepTest, AStragglerOnAThrottledGpuSaysSo) {
  // node-b's GPU 1 is in power brake and hardware slowdown (the recorded
  // H100s' mask 136) from 5 s on; rank 3 on it computes 3x longer.
  ASSERT_TRUE(sup_->GpuHealth(AtS(5), b_, NodeBGpus(0x88)).ok());
  ComputeFn compute = [](uint32_t rank, int64_t) -> std::optional<double> {
    return rank == 3 ? 0.3 : 0.1;
  };
  std::vector<Event> flagged;
  for (int64_t step = 0; step <= 40 && flagged.empty(); ++step) {
    StepAll(AtS(step), step, compute);
    if (step == 20) {  // a later reading, still slowed: the time it began stays
      ASSERT_TRUE(sup_->GpuHealth(AtS(20), b_, NodeBGpus(0x88)).ok());
    }
    flagged = OfKind(Sweep(AtS(step)), EventKind::kStraggler);
  }

  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].rank, 3u);
  EXPECT_THAT(flagged[0].message,
              HasSubstr("its GPU 1 in power brake slowdown, hardware slowdown since "
                        "00:16:45 UTC (25.0s)"));
  EXPECT_EQ(Figure(flagged[0], "gpu_index"), 1.0);
  EXPECT_EQ(Figure(flagged[0], "gpu_slowing_reasons"), 136.0);
  EXPECT_EQ(Figure(flagged[0], "gpu_slowed_seconds"), 25.0);
}

TEST_F(SweepTest, AStragglerWhoseGpuIsNotSlowedNamesNoGpu) {
  // The negative controls: the slowed GPU is another rank's (GPU 1, rank 3)
  // while rank 2 straggles; and a GPU only idle (bit 0x1) is no slowing.
  ASSERT_TRUE(sup_->GpuHealth(AtS(5), b_, NodeBGpus(0x88)).ok());
  ComputeFn compute = [](uint32_t rank, int64_t) -> std::optional<double> {
    return rank == 2 ? 0.3 : 0.1;
  };
  std::vector<Event> flagged;
  for (int64_t step = 0; step <= 40 && flagged.empty(); ++step) {
    StepAll(AtS(step), step, compute);
    flagged = OfKind(Sweep(AtS(step)), EventKind::kStraggler);
  }
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].rank, 2u);
  EXPECT_THAT(flagged[0].message, Not(HasSubstr("GPU")));
  EXPECT_EQ(Figure(flagged[0], "gpu_index"), std::nullopt);
}

TEST_F(SweepTest, ANodesSlowdownWhileItsGpuRunsSlowedNamesTheGpu) {
  // node-b's ranks compute 1.5x longer from step 300 on, while its GPU 1
  // (rank 3's) is in power brake and hardware slowdown.
  ASSERT_TRUE(sup_->GpuHealth(AtS(250), b_, NodeBGpus(0x88)).ok());
  ComputeFn compute = [](uint32_t rank, int64_t step) -> std::optional<double> {
    return rank >= 2 && step >= 300 ? 0.15 : 0.1;
  };
  std::vector<Event> slowed;
  for (int64_t step = 0; step <= 700 && slowed.empty(); ++step) {
    StepAll(AtS(step), step, compute);
    slowed = OfKind(Sweep(AtS(step)), EventKind::kThroughputChange);
  }
  ASSERT_FALSE(slowed.empty());
  EXPECT_EQ(slowed[0].node, "node-b");
  EXPECT_THAT(slowed[0].message,
              HasSubstr("; slowed GPUs: node-b's GPU 1 in power brake slowdown, hardware "
                        "slowdown since 00:20:50 UTC"));
  EXPECT_EQ(Figure(slowed[0], "slowed_gpus"), 1.0);
}

TEST_F(SweepTest, AnUncorrectableErrorThatRisesCountsAgainstTheNode) {
  GpuHealthInfo report = NodeBGpus(0);
  report.gpus[1].ecc_uncorrectable = 2;  // the baseline: before this job
  ASSERT_TRUE(sup_->GpuHealth(AtS(1), b_, report).ok());
  EXPECT_EQ(sup_->node(1).last_gpu_error, "");
  report.gpus[1].ecc_uncorrectable = 5;
  ASSERT_TRUE(sup_->GpuHealth(AtS(2), b_, report).ok());

  EXPECT_EQ(sup_->node(1).last_gpu_error, "uncorrectable ECC errors 2 -> 5 on GPU 1");
  const SupervisorOutput out = sup_->TakeOutput();
  ASSERT_FALSE(out.journal.failures.empty());
  EXPECT_EQ(out.journal.failures.back().kind, "gpu_uncorrectable");
  EXPECT_EQ(out.journal.failures.back().node, "node-b");
  EXPECT_TRUE(out.journal.failures.back().charged);
}

TEST_F(SweepTest, AGpuHealthReportThatCannotBeIsRefused) {
  StepAll(AtS(0), 0);
  GpuHealthInfo report = NodeBGpus(0);
  report.gpus[0].ranks = {4};  // world size 4
  EXPECT_EQ(sup_->GpuHealth(AtS(1), b_, report).code(), absl::StatusCode::kInvalidArgument);
  GpuHealthInfo many;
  many.gpus.resize(kMaxGpusPerNode + 1);
  EXPECT_EQ(sup_->GpuHealth(AtS(1), b_, many).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sup_->GpuHealth(AtS(1), 999, NodeBGpus(0)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sup_->node(1).gpu_health.empty());
}

TEST_F(SweepTest, WallStepTimeAloneNamesNoStraggler) {
  // Every rank's step takes 1s (the collective makes them equal); no rank
  // brackets its compute: nothing to judge.
  for (int64_t step = 0; step <= 100; ++step) {
    StepAll(AtS(step), step);
    EXPECT_TRUE(Detections(Sweep(AtS(step))).empty()) << step;
  }
}

// ---------------------------------------------------------------------------
// Generations

// A job that hung: the stall is reported (and the job is being stopped).
class NewGenerationTest : public SweepTest {
 protected:
  void SetUp() override {
    SweepTest::SetUp();
    RunSteps(10);
    HangOnRank2(AtMs(10500), 11);
    ASSERT_EQ(OfKind(Sweep(AtS(31)), EventKind::kStall).size(), 1u);
    ASSERT_TRUE(entry().verdicts().stalled);
    ASSERT_EQ(entry().verdicts().stall_culprit, 2u);
  }

  void ExpectFreshHealth() {
    const GenerationVerdicts& h = entry().verdicts();
    EXPECT_FALSE(h.stalled);
    EXPECT_EQ(h.stall_culprit, std::nullopt);
    EXPECT_FALSE(h.crash_reported);
    EXPECT_EQ(h.crash_culprit, std::nullopt);
    EXPECT_EQ(h.failure_first_heard, absl::InfinitePast());
  }
};

// Only the supervisor starts generations: a hello or a heartbeat claiming one
// it never started is refused and changes nothing (an agent cannot reset a
// job's verdicts by inventing a generation).
TEST_F(NewGenerationTest, HelloOfAGenerationNeverStartedIsRefusedAndChangesNothing) {
  const uint64_t old = gen_;
  absl::StatusOr<Supervisor::HelloResult> result =
      sup_->Hello(AtS(40), HelloOf("node-a", /*running=*/old + 1));

  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().generation(), old);
  EXPECT_TRUE(entry().verdicts().stalled);
  EXPECT_EQ(entry().verdicts().stall_culprit, 2u);
}

TEST_F(NewGenerationTest, HeartbeatsOfAGenerationNeverStartedAreRefusedAndCounted) {
  const uint64_t old = gen_;
  Heartbeat start = Hb(HeartbeatKind::kStart, 0, 0);
  start.generation = old + 1;
  Send(AtS(40), a_, {start}, {});

  EXPECT_EQ(job().generation(), old);
  EXPECT_TRUE(entry().verdicts().stalled);
  EXPECT_EQ(sup_->rejected().Get(RejectReason::kUnknownGeneration), 1u);
}

TEST_F(NewGenerationTest, RestartedJobIsStalledAgainOnlyByANewHang) {
  StopAndRestart(AtS(40));
  ExpectFreshHealth();
  EXPECT_EQ(entry().event_count(EventKind::kStall), 1u);
  EXPECT_EQ(entry().event_count(EventKind::kRestart), 1u);

  // The new generation runs steps 1..5 from T0 + 50s, then hangs on rank 2.
  RunSteps(5, AtS(50));
  EXPECT_TRUE(Detections(Sweep(AtS(60))).empty());
  HangOnRank2(AtS(56), 6);
  std::vector<Event> events = Detections(Sweep(AtS(76)));

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kStall);
  EXPECT_EQ(events[0].generation, gen_);
  EXPECT_EQ(events[0].rank, 2u);
  EXPECT_EQ(entry().event_count(EventKind::kStall), 2u);
}

TEST_F(SweepTest, CrashOfANewGenerationIsReportedAgain) {
  RunSteps(5);
  Send(AtS(10), b_, {}, {Died(2, 0.5, 1), Alive(3)});
  ASSERT_EQ(OfKind(Sweep(AtS(11)), EventKind::kCrash).size(), 1u);
  ASSERT_TRUE(entry().verdicts().crash_reported);

  StopAndRestart(AtS(20));
  EXPECT_FALSE(entry().verdicts().crash_reported);
  EXPECT_EQ(entry().verdicts().crash_culprit, std::nullopt);
  EXPECT_EQ(entry().event_count(EventKind::kCrash), 1u);

  RunSteps(5, AtS(30));
  Send(AtS(40), a_, {}, {Died(1, 0.5, 1), Alive(0)});
  std::vector<Event> events = Detections(Sweep(AtS(41)));

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kCrash);
  EXPECT_EQ(events[0].generation, gen_);
  EXPECT_EQ(events[0].rank, 1u);
  EXPECT_EQ(events[0].node, "node-a");
  EXPECT_EQ(entry().event_count(EventKind::kCrash), 2u);
}

// ---------------------------------------------------------------------------
// The read model: what the sweep leaves for the adapters

TEST_F(SweepTest, ViewShowsTheLastSweepsStepFiguresUntilTheNext) {
  RunSteps(10);  // 1s steps
  Sweep(AtMs(10500));
  JobView view = *sup_->ViewOf("job", AtMs(10500));
  EXPECT_EQ(view.step_stats.ranks_with_samples, 4u);
  EXPECT_EQ(view.step_stats.median_rank_p99_s, 1.0);
  EXPECT_EQ(view.stall_threshold, absl::Seconds(20));  // the floor

  // A 3s step: no reader recomputes; the next sweep takes it.
  for (SessionId session : {a_, b_}) {
    std::vector<Heartbeat> hbs;
    for (uint32_t r : RanksOf(session)) {
      hbs.push_back(Hb(HeartbeatKind::kStep, r, 11));
      hbs.back().step_duration_s = 3.0;
    }
    Send(AtS(11), session, hbs);
  }
  EXPECT_EQ(sup_->ViewOf("job", AtS(11))->step_stats.median_rank_p99_s, 1.0);
  Sweep(AtMs(11500));
  view = *sup_->ViewOf("job", AtMs(11500));
  EXPECT_EQ(view.step_stats.median_rank_p99_s, 3.0);
  EXPECT_EQ(view.stall_threshold, absl::Seconds(30));  // 10 x p99
}

TEST_F(SweepTest, GenerationThatBeginsToRunShowsItsFiguresBeforeAnySweep) {
  // node-a's report is the generation's first: the job runs, with the
  // figures of what it has heard; node-b's comes after and waits for the
  // sweep.
  StepAll(AtS(1), 1);

  const JobView view = *sup_->ViewOf("job", AtS(1));
  EXPECT_EQ(view.state, JobState::kRunning);
  EXPECT_EQ(view.ranks_reporting, 4u);
  EXPECT_EQ(view.step_stats.ranks_with_samples, 2u);
  EXPECT_EQ(view.step_stats.median_rank_p50_s, 1.0);
  EXPECT_EQ(view.stall_threshold, absl::Seconds(20));
}

TEST_F(SweepTest, ViewNamesTheStallCulpritOnlyWhileTheJobIsStalled) {
  RunSteps(10);
  HangOnRank2(AtMs(10500), 11);
  Sweep(AtMs(30500));

  JobView view = *sup_->ViewOf("job", AtMs(30500));
  EXPECT_TRUE(view.stalled);
  EXPECT_EQ(view.stall_culprit, 2u);
  EXPECT_EQ(view.stall_culprit_node, "node-b");
  std::vector<RankView> rows;
  std::vector<RankTexts> texts;
  ASSERT_TRUE(sup_->RankViewsOf("job", &rows, &texts));
  ASSERT_EQ(rows.size(), 4u);
  for (const RankView& row : rows) EXPECT_EQ(row.stall_culprit, row.rank == 2) << row.rank;

  StopAndRestart(AtS(31));
  view = *sup_->ViewOf("job", AtS(36));
  EXPECT_EQ(view.generation, gen_);
  EXPECT_FALSE(view.stalled);
  EXPECT_EQ(view.stall_culprit, std::nullopt);
  EXPECT_EQ(view.stall_culprit_node, "");
}

TEST_F(SweepTest, ViewCountsTheRanksByLivenessAsTheyReport) {
  RunSteps(2);
  Send(AtS(3), a_, {}, {Alive(0), Died(1, 0.5, 1)});
  Disconnect(AtS(3), b_);  // ranks 2 and 3: unknown

  const JobView view = *sup_->ViewOf("job", AtS(3));
  EXPECT_EQ(view.ranks_reporting, 4u);
  EXPECT_EQ(view.ranks_alive, 1u);
  EXPECT_EQ(view.seen.alive, 1u);
  EXPECT_EQ(view.seen.dead, 1u);
  EXPECT_EQ(view.seen.unknown, 2u);
  std::vector<RankView> rows;
  std::vector<RankTexts> texts;
  ASSERT_TRUE(sup_->RankViewsOf("job", &rows, &texts));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1].liveness, Liveness::kDead);
  ASSERT_LT(rows[1].texts, texts.size());
  EXPECT_EQ(texts[rows[1].texts].exit, "exit code 1");
  EXPECT_EQ(rows[2].liveness, Liveness::kUnknown);
  EXPECT_FALSE(sup_->RankViewsOf("no-such-job", &rows, &texts));
}

}  // namespace
}  // namespace trainsup
