// The Supervisor's lifecycle driven through Hello/Report/Sweep as the agents'
// adapter does: coordinated restarts, the stop deadline, the restart cap and
// resume, quarantine (policy and operator), a clean finish, a world-size
// change, and Restore from the state store. Checked on what goes out:
// TakeOutput()'s commands, journal rows, fences and events.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "daemon/core/event_log.h"
#include "daemon/core/events.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_state.h"
#include "daemon/core/journal.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::MakeHeartbeat;
using ::trainsup::testing::MakeHello;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;
using Kind = AgentCommand::Kind;

using ::trainsup::testing::AtMs;
using ::trainsup::testing::AtS;

// The lifecycle commands' names; nullptr for other kinds (e.g. checkpoint
// plans), which these tests leave out.
const char* KindName(Kind kind) {
  if (kind == Kind::kStop) return "stop";
  if (kind == Kind::kStart) return "start";
  if (kind == Kind::kHold) return "hold";
  if (kind == Kind::kQuarantine) return "quarantine";
  return nullptr;
}

// The lifecycle commands only.
std::vector<AgentCommand> Lifecycle(const std::vector<AgentCommand>& commands) {
  std::vector<AgentCommand> out;
  for (const AgentCommand& c : commands) {
    if (KindName(c.kind) != nullptr) out.push_back(c);
  }
  return out;
}

// "start node-a gen 2" for each lifecycle command.
std::vector<std::string> Describe(const std::vector<AgentCommand>& commands) {
  std::vector<std::string> out;
  for (const AgentCommand& c : Lifecycle(commands)) {
    out.push_back(absl::StrCat(KindName(c.kind), " ", c.node, " gen ", c.generation));
  }
  return out;
}

void ExpectSameEvents(const std::vector<Event>& journal, const std::vector<Event>& output) {
  ASSERT_EQ(journal.size(), output.size());
  for (size_t i = 0; i < journal.size(); ++i) {
    const Event& a = journal[i];
    const Event& b = output[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.time, b.time);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.job, b.job);
    EXPECT_EQ(a.generation, b.generation);
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.node, b.node);
    EXPECT_EQ(a.message, b.message);
    EXPECT_EQ(a.figures, b.figures);
  }
}

constexpr uint32_t kWorld = 4;  // ranks 0, 1 on node-a; 2, 3 on node-b

class LifecycleTest : public FakeAgentsTest {
 protected:
  void SetUp() override { options_ = FakeAgentsOptions(); }

  // Creates the supervisor; fresh agents on node-a and node-b say hello at
  // `now` and are told to launch generation 1.
  void Start(absl::Time now = AtS(0)) {
    Create();
    ConnectAgents(now);
    ASSERT_EQ(gen_, 1u);
    Take();
  }

  // The job's command exits 0 on node-a and node-b at `end` and their agents
  // leave; at `next_hello` the next job's agents say hello with the same
  // node names (back-to-back Slurm steps), before this job's sweep.
  void EndOnBothNodesAndPassThemOn(absl::Time end, absl::Time next_hello) {
    SendLauncherExit(end, a_, 0);
    SendLauncherExit(end, b_, 0);
    Disconnect(end, a_);
    Disconnect(end, b_);
    Connect(next_hello, MakeHello("node-a", "next", 101));
    Connect(next_hello, MakeHello("node-b", "next", 102));
  }

  // What the supervisor decided since the last call. Every output must
  // journal exactly the events it reports.
  SupervisorOutput Take() {
    SupervisorOutput out = sup_->TakeOutput();
    ExpectSameEvents(out.journal.events, out.events);
    return out;
  }

  // Every rank of `session` completes `step`, with `samples` per step.
  void SendStep(absl::Time now, SessionId session, int64_t step, uint64_t samples = 8) {
    std::vector<Heartbeat> hbs;
    std::vector<RankProcessInfo> processes;
    for (uint32_t r : RanksOf(session)) {
      Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
      hb.step_duration_s = 1.0;
      hb.samples = samples;
      hbs.push_back(hb);
      processes.push_back(Alive(r));
    }
    Send(now, session, hbs, processes);
  }

  void StepAll(absl::Time now, int64_t step) {
    SendStep(now, a_, step);
    SendStep(now, b_, step);
  }

  // Rank 0 on node-a was killed by SIGSEGV 0.5s before `now` (a native
  // crash: it counts against node-a); the crash settles and is acted on at
  // `now` + 1s. Returns that sweep's output.
  SupervisorOutput CrashOnNodeA(absl::Time now) {
    Send(now, a_, {}, {Died(0, 0.5, 0, /*signal=*/11), Alive(1)});
    Sweep(now + absl::Seconds(1));
    return Take();
  }

  // Both agents obey the stop at `now`; the supervisor sweeps then.
  SupervisorOutput BothStop(absl::Time now) {
    SendLauncherExit(now, a_, 0, /*signal=*/15);
    SendLauncherExit(now, b_, 0, /*signal=*/15);
    Sweep(now);
    return Take();
  }

  // A crash at `now`, the stop 2s later, and the next generation after
  // `backoff`; the agents launch it and run a step. Returns the time after.
  absl::Time CrashAndRestart(absl::Time now, absl::Duration backoff) {
    CrashOnNodeA(now);
    BothStop(now + absl::Seconds(2));
    const absl::Time start = now + absl::Seconds(2) + backoff;
    Sweep(start);
    EXPECT_EQ(job().generation(), gen_ + 1);
    gen_ = job().generation();
    Take();
    SendStarted(start + absl::Seconds(1), a_);
    SendStarted(start + absl::Seconds(1), b_);
    StepAll(start + absl::Seconds(2), 1);
    Sweep(start + absl::Seconds(2));
    Take();
    return start + absl::Seconds(3);
  }
};

// ---------------------------------------------------------------------------
// Coordinated restart

TEST_F(LifecycleTest, RanksReportingMoveTheJobToRunning) {
  Start();
  EXPECT_EQ(state(), "pending");
  SendStarted(AtS(1), a_);
  EXPECT_EQ(state(), "running");
  SupervisorOutput out = Take();
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "running");
  EXPECT_EQ(out.journal.jobs[0].generation, 1u);
}

TEST_F(LifecycleTest, CrashStopsTheJobOnEveryConnectedAgentOnce) {
  Start();
  StepAll(AtS(1), 1);
  Take();

  SupervisorOutput out = CrashOnNodeA(AtS(10));

  EXPECT_EQ(state(), "stopping");
  EXPECT_THAT(Describe(out.commands),
              ::testing::UnorderedElementsAre("stop node-a gen 1", "stop node-b gen 1"));
  for (const AgentCommand& c : Lifecycle(out.commands)) {
    EXPECT_EQ(c.session, c.node == "node-a" ? a_ : b_);
    EXPECT_EQ(c.grace, absl::Seconds(10));
  }
  ASSERT_EQ(OfKind(out.events, EventKind::kCrash).size(), 1u);
  ASSERT_EQ(out.journal.failures.size(), 1u);
  const FailureRow& f = out.journal.failures[0];
  EXPECT_EQ(f.time, AtS(9.5));
  EXPECT_EQ(f.job, "job");
  EXPECT_EQ(f.generation, 1u);
  EXPECT_EQ(f.kind, "crash");
  EXPECT_EQ(f.node, "node-a");
  EXPECT_EQ(f.rank, 0u);
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "stopping");

  // The agents have not stopped yet: more sweeps send nothing again.
  Send(AtS(11.5), b_, {}, {Alive(2), Alive(3)});
  Sweep(AtS(12));
  Sweep(AtS(13));
  SupervisorOutput later = Take();
  EXPECT_TRUE(Describe(later.commands).empty()) << ::testing::PrintToString(Describe(later.commands));
  EXPECT_EQ(state(), "stopping");
}

TEST_F(LifecycleTest, AllStoppedMeansRestartingWithThePolicysBackoff) {
  Start();
  StepAll(AtS(1), 1);
  CrashOnNodeA(AtS(10));

  SendLauncherExit(AtS(13), a_, 1);
  Sweep(AtS(13));
  EXPECT_EQ(state(), "stopping");  // node-b still runs
  SendLauncherExit(AtS(15), b_, 0, 15);
  Sweep(AtS(15));

  EXPECT_EQ(state(), "restarting");
  const JobLifecycle* control = &sup_->FindEntry("job")->lifecycle();
  EXPECT_EQ(control->restart_at, AtS(20));
  EXPECT_THAT(control->reason, HasSubstr("every node stopped"));
  SupervisorOutput out = Take();
  EXPECT_TRUE(Describe(out.commands).empty());
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "restarting");

  // Not before the backoff.
  Sweep(AtS(20) - absl::Nanoseconds(1));
  EXPECT_EQ(state(), "restarting");
  EXPECT_TRUE(Describe(Take().commands).empty());
}

TEST_F(LifecycleTest, AfterTheBackoffGenerationTwoStartsOnEveryAgent) {
  Start();
  StepAll(AtS(1), 1);
  CrashOnNodeA(AtS(10));
  SendLauncherExit(AtS(15), a_, 1);
  SendLauncherExit(AtS(15), b_, 0, 15);
  Sweep(AtS(15));
  Take();

  Sweep(AtS(20));

  EXPECT_EQ(state(), "running");
  EXPECT_EQ(job().generation(), 2u);
  SupervisorOutput out = Take();
  EXPECT_THAT(Describe(out.commands),
              ::testing::UnorderedElementsAre("start node-a gen 2", "start node-b gen 2"));
  std::vector<Event> restarts = OfKind(out.events, EventKind::kRestart);
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].generation, 2u);
  EXPECT_EQ(restarts[0].time, AtS(20));
  EXPECT_EQ(Figure(restarts[0], "nodes"), 2.0);
  EXPECT_EQ(Figure(restarts[0], "nodes_left_out"), 0.0);
  ASSERT_EQ(out.journal.restarts.size(), 1u);
  const RestartRow& r = out.journal.restarts[0];
  EXPECT_EQ(r.time, AtS(20));
  EXPECT_EQ(r.job, "job");
  EXPECT_EQ(r.from_generation, 1u);
  EXPECT_EQ(r.to_generation, 2u);
  EXPECT_THAT(r.reason, HasSubstr("crash on node-a"));
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "running");
  EXPECT_EQ(out.journal.jobs[0].generation, 2u);
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().restarts, 1u);

  // Sent once.
  Sweep(AtS(21));
  EXPECT_TRUE(Describe(Take().commands).empty());
}

TEST_F(LifecycleTest, FirstStepOfTheNewGenerationIsARecoveredEventWithItsTiming) {
  Start();
  StepAll(AtS(1), 1);
  CrashOnNodeA(AtS(10));            // died 9.5, detected 11
  SendLauncherExit(AtS(15), a_, 1);  // stopped 15
  SendLauncherExit(AtS(15), b_, 0, 15);
  Sweep(AtS(15));
  Sweep(AtS(20));  // started 20
  gen_ = 2;
  Take();

  SendStarted(AtS(22), a_);  // first heartbeat 22
  SendStarted(AtS(22.5), b_);
  Sweep(AtS(23));
  EXPECT_TRUE(OfKind(Take().events, EventKind::kRecovered).empty());  // no step yet
  StepAll(AtS(25), 1);  // first step 25
  Sweep(AtS(25.5));

  SupervisorOutput out = Take();
  std::vector<Event> recovered = OfKind(out.events, EventKind::kRecovered);
  ASSERT_EQ(recovered.size(), 1u);
  const Event& e = recovered[0];
  EXPECT_EQ(e.generation, 2u);
  EXPECT_EQ(Figure(e, "detect_seconds"), 1.5);
  EXPECT_EQ(Figure(e, "stop_seconds"), 4.0);
  EXPECT_EQ(Figure(e, "backoff_seconds"), 5.0);
  EXPECT_EQ(Figure(e, "relaunch_seconds"), 2.0);
  EXPECT_EQ(Figure(e, "first_step_seconds"), 3.0);
  EXPECT_EQ(Figure(e, "total_seconds"), 15.5);
  double sum = 0;
  for (const char* part : {"detect_seconds", "stop_seconds", "backoff_seconds",
                           "relaunch_seconds", "first_step_seconds"}) {
    sum += Figure(e, part).value_or(-1000);
  }
  EXPECT_DOUBLE_EQ(sum, *Figure(e, "total_seconds"));

  // Once.
  StepAll(AtS(26), 2);
  Sweep(AtS(26));
  EXPECT_TRUE(OfKind(Take().events, EventKind::kRecovered).empty());
  EXPECT_EQ(entry().event_count(EventKind::kRecovered), 1u);
}

TEST_F(LifecycleTest, AgentThatNeverStopsDoesNotBlockTheRestartPastTheStopTimeout) {
  Start();
  StepAll(AtS(1), 1);
  CrashOnNodeA(AtS(10));  // stopping from 11; deadline 71
  SendLauncherExit(AtS(13), a_, 1);
  // node-b keeps reporting its command running.
  Send(AtS(30), b_, {}, {Alive(2), Alive(3)});
  Sweep(AtS(71) - absl::Nanoseconds(1));
  EXPECT_EQ(state(), "stopping");

  Sweep(AtS(71));

  EXPECT_EQ(state(), "restarting");
  EXPECT_THAT(sup_->FindEntry("job")->lifecycle().reason,
              HasSubstr("1 node did not stop within 60.0s"));
  Sweep(AtS(76));
  EXPECT_EQ(state(), "running");
  EXPECT_EQ(job().generation(), 2u);
  SupervisorOutput out = Take();
  // Only the stopped agent can start; the straggler got its stop already.
  EXPECT_THAT(Describe(out.commands), ::testing::ElementsAre("start node-a gen 2"));

  // When node-b finally stops it is started too.
  SendLauncherExit(AtS(80), b_, 0, 9);
  Sweep(AtS(80));
  EXPECT_THAT(Describe(Take().commands), ::testing::ElementsAre("start node-b gen 2"));
}

TEST_F(LifecycleTest, DisconnectedAgentDoesNotBlockTheStop) {
  Start();
  StepAll(AtS(1), 1);
  CrashOnNodeA(AtS(10));
  SendLauncherExit(AtS(12), a_, 1);
  Disconnect(AtS(12), b_);
  Sweep(AtS(12));
  EXPECT_EQ(state(), "restarting");
  Sweep(AtS(17));
  EXPECT_THAT(Describe(Take().commands), ::testing::ElementsAre("start node-a gen 2"));
}

// ---------------------------------------------------------------------------
// Restart cap, hold and resume

class HoldTest : public LifecycleTest {
 protected:
  // With --restart-limit 2, two failures restart the job and the third holds it.
  void SetUp() override {
    LifecycleTest::SetUp();
    options_.restart.limit = 2;
    options_.quarantine.after = 100;  // node-a fails often, yet stays
    Start();
    StepAll(AtS(1), 1);
    absl::Time t = CrashAndRestart(AtS(10), absl::Seconds(5));
    t = CrashAndRestart(t + absl::Seconds(10), absl::Seconds(10));
    ASSERT_EQ(job().generation(), 3u);
    ASSERT_EQ(state(), "running");
    third_ = t + absl::Seconds(10);
    CrashOnNodeA(third_);
    hold_out_ = BothStop(third_ + absl::Seconds(2));
  }

  absl::Time third_;
  SupervisorOutput hold_out_;
};

TEST_F(HoldTest, ThirdFailureWithinTheWindowHoldsTheJob) {
  EXPECT_EQ(state(), "held");
  EXPECT_EQ(job().generation(), 3u);
  std::vector<Event> holds = OfKind(hold_out_.events, EventKind::kHold);
  ASSERT_EQ(holds.size(), 1u);
  EXPECT_EQ(holds[0].generation, 3u);
  EXPECT_EQ(Figure(holds[0], "restarts_in_window"), 2.0);
  EXPECT_EQ(Figure(holds[0], "restart_limit"), 2.0);
  EXPECT_EQ(Figure(holds[0], "window_seconds"), 3600.0);
  ASSERT_EQ(hold_out_.journal.jobs.size(), 1u);
  EXPECT_EQ(hold_out_.journal.jobs[0].state, "held");
  EXPECT_THAT(hold_out_.journal.jobs[0].reason, HasSubstr("restart limit reached"));
  EXPECT_TRUE(hold_out_.journal.restarts.empty());
}

TEST_F(HoldTest, WaitingAgentsAreToldToHoldAndNotToStart) {
  EXPECT_THAT(Describe(hold_out_.commands),
              ::testing::UnorderedElementsAre("hold node-a gen 3", "hold node-b gen 3"));
}

TEST_F(HoldTest, SweepWhileHeldDoesNothing) {
  for (absl::Duration d : {absl::Seconds(1), absl::Minutes(10), absl::Hours(3)}) {
    std::vector<Event> events = Sweep(third_ + d);
    EXPECT_TRUE(events.empty());
    SupervisorOutput out = Take();
    EXPECT_TRUE(Describe(out.commands).empty());
    EXPECT_TRUE(out.journal.empty());
    EXPECT_EQ(state(), "held");
  }
  EXPECT_EQ(job().generation(), 3u);
}

TEST_F(HoldTest, ResumeRestartsTheHeldJob) {
  const absl::Time now = third_ + absl::Minutes(5);
  absl::StatusOr<std::string> said = sup_->Resume(now, "job");
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "job job resumed: generation 4 starts now");
  EXPECT_EQ(state(), "restarting");
  SupervisorOutput resumed = Take();
  ASSERT_EQ(OfKind(resumed.events, EventKind::kResume).size(), 1u);
  EXPECT_EQ(OfKind(resumed.events, EventKind::kResume)[0].job, "job");
  ASSERT_EQ(resumed.journal.jobs.size(), 1u);
  EXPECT_EQ(resumed.journal.jobs[0].state, "restarting");

  Sweep(now);

  EXPECT_EQ(state(), "running");
  EXPECT_EQ(job().generation(), 4u);
  SupervisorOutput out = Take();
  EXPECT_THAT(Describe(out.commands),
              ::testing::UnorderedElementsAre("start node-a gen 4", "start node-b gen 4"));
  ASSERT_EQ(out.journal.restarts.size(), 1u);
  EXPECT_EQ(out.journal.restarts[0].to_generation, 4u);
}

TEST_F(HoldTest, ResumedJobGetsAFreshRestartBudget) {
  const absl::Time now = third_ + absl::Minutes(5);
  ASSERT_TRUE(sup_->Resume(now, "job").ok());
  Sweep(now + absl::Seconds(1));
  gen_ = job().generation();
  Take();
  SendStarted(now + absl::Seconds(2), a_);
  SendStarted(now + absl::Seconds(2), b_);

  // The failure right after: restarted, not held; only the restart after
  // the resume counts (backoff 5s x 2^1).
  CrashOnNodeA(now + absl::Seconds(3));
  BothStop(now + absl::Seconds(5));
  EXPECT_EQ(state(), "restarting");
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().restart_at, now + absl::Seconds(15));
}

// The restart right at a resume counts towards the cap: with
// --restart-limit 2 a resumed job that keeps failing is held again.
TEST_F(HoldTest, RestartRightAtResumeCountsTowardsTheCap) {
  const absl::Time now = third_ + absl::Minutes(5);
  ASSERT_TRUE(sup_->Resume(now, "job").ok());
  Sweep(now);  // restart #1 after the resume, at the resume's instant
  gen_ = job().generation();
  Take();
  SendStarted(now + absl::Seconds(1), a_);
  SendStarted(now + absl::Seconds(1), b_);
  absl::Time t = now + absl::Seconds(2);
  t = CrashAndRestart(t, absl::Seconds(10));  // restart #2: backoff 5s x 2^1
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().restarts, 4u);

  CrashOnNodeA(t);
  BothStop(t + absl::Seconds(2));
  EXPECT_EQ(state(), "held");  // actual: restarting
}

TEST_F(HoldTest, ResumeOfAJobThatIsNotHeldChangesNothing) {
  ASSERT_TRUE(sup_->Resume(third_ + absl::Minutes(1), "job").ok());
  Sweep(third_ + absl::Minutes(1));
  ASSERT_EQ(state(), "running");
  const uint64_t generation = job().generation();
  Take();

  absl::StatusOr<std::string> said = sup_->Resume(third_ + absl::Minutes(2), "job");

  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_THAT(*said, HasSubstr("not held"));
  EXPECT_THAT(*said, HasSubstr("running"));
  EXPECT_EQ(state(), "running");
  EXPECT_EQ(job().generation(), generation);
  SupervisorOutput out = Take();
  EXPECT_TRUE(out.events.empty());
  EXPECT_TRUE(Describe(out.commands).empty());
  EXPECT_TRUE(out.journal.empty());
}

TEST_F(LifecycleTest, ResumeOfARunningJobSaysNotHeld) {
  Start();
  StepAll(AtS(1), 1);
  Take();
  absl::StatusOr<std::string> said = sup_->Resume(AtS(2), "job");
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_THAT(*said, HasSubstr("not held"));
  EXPECT_EQ(state(), "running");
  EXPECT_TRUE(Take().journal.empty());
}

TEST_F(LifecycleTest, ResumeOfAnUnknownJobIsNotFound) {
  Start();
  absl::StatusOr<std::string> said = sup_->Resume(AtS(2), "no-such-job");
  EXPECT_EQ(said.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Take().journal.empty());
}

// ---------------------------------------------------------------------------
// Quarantine by policy

class PolicyQuarantineTest : public LifecycleTest {
 protected:
  // Quarantine after 2 failures: rank 0 on node-a crashes twice.
  void SetUp() override {
    LifecycleTest::SetUp();
    options_.quarantine.after = 2;
    Start();
    StepAll(AtS(1), 1);
    second_ = CrashAndRestart(AtS(10), absl::Seconds(5)) + absl::Seconds(10);
    ASSERT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
    out_ = CrashOnNodeA(second_);
  }

  absl::Time second_;
  SupervisorOutput out_;
};

TEST_F(PolicyQuarantineTest, SecondFailureOnTheNodeQuarantinesIt) {
  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-a"));
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-b"));

  ASSERT_EQ(out_.journal.nodes.size(), 1u);
  const NodeRecordRow& row = out_.journal.nodes[0];
  EXPECT_EQ(row.name, "node-a");
  EXPECT_TRUE(row.quarantined);
  EXPECT_EQ(row.changed_by, "policy");
  EXPECT_EQ(row.changed, second_ + absl::Seconds(1));
  EXPECT_THAT(row.reason, HasSubstr("2 failures within 1h"));
  EXPECT_THAT(row.reason, HasSubstr("crash of rank 0 (killed by SIGSEGV (signal 11))"));

  ASSERT_EQ(out_.fences.size(), 1u);
  EXPECT_EQ(out_.fences[0].node, "node-a");
  EXPECT_EQ(out_.fences[0].reason, row.reason);

  std::vector<Event> q = OfKind(out_.events, EventKind::kQuarantine);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].node, "node-a");
  EXPECT_EQ(q[0].job, "job");
  EXPECT_EQ(q[0].generation, 2u);
  EXPECT_EQ(Figure(q[0], "failures"), 2.0);
  EXPECT_EQ(Figure(q[0], "window_seconds"), 3600.0);
  // The event says what the node's record says.
  EXPECT_EQ(q[0].message,
            QuarantineEvent(row.changed, {}, row.name, row.changed_by, row.reason).message);
}

TEST_F(PolicyQuarantineTest, QuarantinedAgentIsToldAndTheOtherStopped) {
  EXPECT_EQ(state(), "stopping");
  EXPECT_THAT(Describe(out_.commands),
              ::testing::UnorderedElementsAre("quarantine node-a gen 2", "stop node-b gen 2"));
  for (const AgentCommand& c : Lifecycle(out_.commands)) {
    if (c.kind == Kind::kQuarantine) {
      EXPECT_THAT(c.reason, HasSubstr("2 failures"));
    }
  }
}

TEST_F(PolicyQuarantineTest, JobRestartsWithoutTheQuarantinedNode) {
  // node-a's agent stops its command and goes away; node-b stops.
  SendLauncherExit(second_ + absl::Seconds(2), a_, 0, 15);
  Disconnect(second_ + absl::Seconds(2), a_);
  SendLauncherExit(second_ + absl::Seconds(2), b_, 0, 15);
  Sweep(second_ + absl::Seconds(2));
  EXPECT_EQ(state(), "restarting");
  Sweep(second_ + absl::Seconds(12));  // second restart: backoff 10s

  EXPECT_EQ(state(), "running");
  EXPECT_EQ(job().generation(), 3u);
  SupervisorOutput out = Take();
  EXPECT_THAT(Describe(out.commands), ::testing::ElementsAre("start node-b gen 3"));
  std::vector<Event> restarts = OfKind(out.events, EventKind::kRestart);
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0].generation, 3u);
  EXPECT_EQ(Figure(restarts[0], "nodes"), 1.0);           // node-b
  EXPECT_EQ(Figure(restarts[0], "nodes_left_out"), 1.0);  // node-a, quarantined
}

TEST_F(PolicyQuarantineTest, ConnectedQuarantinedAgentIsNotStartedEither) {
  // node-a's agent stays connected after stopping.
  SendLauncherExit(second_ + absl::Seconds(2), a_, 0, 15);
  SendLauncherExit(second_ + absl::Seconds(2), b_, 0, 15);
  Sweep(second_ + absl::Seconds(2));
  Sweep(second_ + absl::Seconds(12));
  EXPECT_THAT(Describe(Take().commands), ::testing::ElementsAre("start node-b gen 3"));
}

TEST_F(PolicyQuarantineTest, HelloFromTheQuarantinedNodeIsToldNotToLaunch) {
  Disconnect(second_ + absl::Seconds(2), a_);
  Take();
  Supervisor::HelloResult result;
  const SessionId again = Connect(second_ + absl::Seconds(30), "node-a", std::nullopt, &result);

  EXPECT_FALSE(result.launch);
  std::vector<AgentCommand> commands = Lifecycle(Take().commands);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0].kind, Kind::kQuarantine);
  EXPECT_EQ(commands[0].node, "node-a");
  EXPECT_EQ(commands[0].session, again);
  EXPECT_THAT(commands[0].reason, HasSubstr("2 failures within 1h"));
}

// ---------------------------------------------------------------------------
// Operator quarantine

TEST_F(LifecycleTest, OperatorQuarantineIsJournaledFencedAndRestartsTheJob) {
  Start();
  StepAll(AtS(1), 1);
  Take();

  absl::StatusOr<std::string> said = sup_->Quarantine(AtS(5), "node-b", "bad GPU 3");

  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "node node-b quarantined");
  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-b"));
  EXPECT_EQ(state(), "stopping");
  SupervisorOutput out = Take();
  ASSERT_EQ(out.journal.nodes.size(), 1u);
  EXPECT_EQ(out.journal.nodes[0].name, "node-b");
  EXPECT_TRUE(out.journal.nodes[0].quarantined);
  EXPECT_EQ(out.journal.nodes[0].reason, "bad GPU 3");
  EXPECT_EQ(out.journal.nodes[0].changed_by, "operator");
  EXPECT_EQ(out.journal.nodes[0].changed, AtS(5));
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-b");
  ASSERT_EQ(out.journal.fences.size(), 1u);  // pending, in the same journal as the quarantine
  EXPECT_TRUE(out.journal.fences[0].pending);
  ASSERT_EQ(OfKind(out.events, EventKind::kQuarantine).size(), 1u);
  const Event q = OfKind(out.events, EventKind::kQuarantine)[0];
  EXPECT_EQ(q.node, "node-b");
  const NodeRecordRow& row = out.journal.nodes[0];
  EXPECT_EQ(q.message,
            QuarantineEvent(row.changed, {}, row.name, row.changed_by, row.reason).message);

  // The sweep tells the agents.
  Sweep(AtS(5));
  EXPECT_THAT(Describe(Take().commands),
              ::testing::UnorderedElementsAre("stop node-a gen 1", "quarantine node-b gen 1"));
}

TEST_F(LifecycleTest, OperatorQuarantineTwiceSaysAlreadyQuarantined) {
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();

  absl::StatusOr<std::string> said = sup_->Quarantine(AtS(6), "node-b", "again");

  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_THAT(*said, HasSubstr("node node-b already quarantined"));
  EXPECT_THAT(*said, HasSubstr("bad GPU 3"));
  SupervisorOutput out = Take();
  EXPECT_TRUE(out.journal.empty());
  EXPECT_TRUE(out.fences.empty());
  EXPECT_EQ(sup_->quarantine().ReasonOf("node-b"), "bad GPU 3");
}

TEST_F(LifecycleTest, OperatorQuarantineOfAnUnknownNodeIsNotFound) {
  Start();
  EXPECT_EQ(sup_->Quarantine(AtS(5), "node-z", "x").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sup_->Unquarantine(AtS(5), "node-z").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Take().journal.empty());
}

TEST_F(LifecycleTest, OperatorQuarantinePastTheFractionCapIsRefusedUnlessForced) {
  Start();  // two nodes: the cap allows one
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();

  absl::StatusOr<std::string> refused = sup_->Quarantine(AtS(6), "node-a", "flaky NIC");

  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("--quarantine-max-fraction"));
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
  SupervisorOutput out = Take();
  EXPECT_TRUE(out.journal.empty());
  EXPECT_TRUE(out.fences.empty());

  absl::StatusOr<std::string> forced = sup_->Quarantine(AtS(7), "node-a", "flaky NIC", true);

  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-a"));
  EXPECT_EQ(Take().fences.size(), 1u);
}

TEST_F(LifecycleTest, OperatorQuarantineRefusesAReasonBreakingTheRule) {
  Start();
  for (const std::string& reason :
       {std::string(), std::string(kMaxReasonLength + 1, 'r'), std::string("two\nlines"),
        std::string("bad \xFF byte")}) {
    EXPECT_EQ(sup_->Quarantine(AtS(5), "node-b", reason, true).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-b"));
  EXPECT_TRUE(Take().journal.empty());
}

TEST_F(LifecycleTest, OperatorUnquarantineIsJournaledOnce) {
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();

  absl::StatusOr<std::string> said = sup_->Unquarantine(AtS(100), "node-b");

  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "node node-b unquarantined");
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-b"));
  SupervisorOutput out = Take();
  ASSERT_EQ(out.journal.nodes.size(), 1u);
  EXPECT_EQ(out.journal.nodes[0].name, "node-b");
  EXPECT_FALSE(out.journal.nodes[0].quarantined);
  EXPECT_EQ(out.journal.nodes[0].changed_by, "operator");
  EXPECT_EQ(out.journal.nodes[0].changed, AtS(100));
  ASSERT_EQ(OfKind(out.events, EventKind::kUnquarantine).size(), 1u);
  EXPECT_EQ(OfKind(out.events, EventKind::kUnquarantine)[0].node, "node-b");

  absl::StatusOr<std::string> again = sup_->Unquarantine(AtS(101), "node-b");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, "node node-b already not quarantined");
  EXPECT_TRUE(Take().journal.empty());
}

TEST_F(LifecycleTest, UnquarantineWithoutAnUnfenceCommandOnlyDropsThePendingFence) {
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();

  ASSERT_TRUE(sup_->Unquarantine(AtS(100), "node-b").ok());

  SupervisorOutput out = Take();
  EXPECT_TRUE(out.fences.empty());
  ASSERT_EQ(out.journal.fences.size(), 1u);
  EXPECT_EQ(out.journal.fences[0].node, "node-b");
  EXPECT_FALSE(out.journal.fences[0].pending);
}

TEST_F(LifecycleTest, UnquarantineWithAnUnfenceCommandDecidesAPendingUnfence) {
  options_.unfence = true;
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();

  ASSERT_TRUE(sup_->Unquarantine(AtS(100), "node-b").ok());

  SupervisorOutput out = Take();
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-b");
  EXPECT_EQ(out.fences[0].action, FenceAction::kUnfence);
  EXPECT_EQ(out.fences[0].reason, "quarantine lifted by an operator");
  EXPECT_EQ(out.fences[0].decided, AtS(100));
  // Pending (in the same journal as the lifted quarantine), replacing the fence.
  ASSERT_EQ(out.journal.fences.size(), 1u);
  EXPECT_TRUE(out.journal.fences[0].pending);
  EXPECT_EQ(out.journal.fences[0].action, FenceAction::kUnfence);
}

TEST_F(LifecycleTest, AFenceEndingAfterTheUnquarantineLeavesTheUnfencePending) {
  options_.unfence = true;
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  const FenceRequest fence = Take().fences.at(0);
  ASSERT_TRUE(sup_->Unquarantine(AtS(6), "node-b").ok());
  const FenceRequest unfence = Take().fences.at(0);

  // The fence decided first ends first (the driver runs them in order).
  sup_->FenceDone(AtS(7), fence, true, "exit code 0");
  SupervisorOutput out = Take();
  EXPECT_TRUE(out.journal.fences.empty());  // the unfence's row stays pending
  ASSERT_EQ(OfKind(out.events, EventKind::kFence).size(), 1u);

  sup_->FenceDone(AtS(8), unfence, false, "exit code 1; output: Invalid node name specified");
  out = Take();
  EXPECT_TRUE(out.journal.fences.empty());  // failed: still pending, run again at a restart
  ASSERT_EQ(OfKind(out.events, EventKind::kUnfence).size(), 1u);
  const Event failed = OfKind(out.events, EventKind::kUnfence)[0];
  EXPECT_EQ(failed.node, "node-b");
  EXPECT_EQ(Figure(failed, "ok"), 0);
  // The command's output is quoted: the only place it is kept.
  EXPECT_THAT(failed.message, HasSubstr(": exit code 1; output: Invalid node name specified"));

  sup_->FenceDone(AtS(9), unfence, true, "exit code 0");
  out = Take();
  ASSERT_EQ(out.journal.fences.size(), 1u);
  EXPECT_EQ(out.journal.fences[0].node, "node-b");
  EXPECT_FALSE(out.journal.fences[0].pending);
  ASSERT_EQ(OfKind(out.events, EventKind::kUnfence).size(), 1u);
  EXPECT_EQ(OfKind(out.events, EventKind::kUnfence)[0].node, "node-b");
  EXPECT_EQ(Figure(OfKind(out.events, EventKind::kUnfence)[0], "ok"), 1);
}

TEST_F(LifecycleTest, AnUnfenceEndingAfterARequarantineLeavesTheNewFencePending) {
  options_.unfence = true;
  Start();
  ASSERT_TRUE(sup_->Quarantine(AtS(5), "node-b", "bad GPU 3").ok());
  Take();
  ASSERT_TRUE(sup_->Unquarantine(AtS(6), "node-b").ok());
  const FenceRequest unfence = Take().fences.at(0);
  ASSERT_TRUE(sup_->Quarantine(AtS(7), "node-b", "bad GPU 3 again").ok());
  SupervisorOutput out = Take();
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].action, FenceAction::kFence);

  sup_->FenceDone(AtS(8), unfence, true, "exit code 0");

  EXPECT_TRUE(Take().journal.fences.empty());  // the new fence is still to be seen to succeed
}

TEST_F(LifecycleTest, NeverQuarantinedNodeIsAlreadyNotQuarantined) {
  Start();
  absl::StatusOr<std::string> said = sup_->Unquarantine(AtS(5), "node-a");
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_EQ(*said, "node node-a already not quarantined");
  EXPECT_TRUE(Take().journal.empty());
}

TEST_F(LifecycleTest, UnquarantinedNodeIsNotRequarantinedByTheNextSingleFailure) {
  options_.quarantine.after = 2;
  Start();
  StepAll(AtS(1), 1);
  absl::Time t = CrashAndRestart(AtS(10), absl::Seconds(5));
  CrashOnNodeA(t + absl::Seconds(10));
  ASSERT_TRUE(sup_->quarantine().IsQuarantined("node-a"));
  ASSERT_TRUE(sup_->Unquarantine(t + absl::Seconds(20), "node-a").ok());

  // node-a is restarted with the job and fails once more.
  BothStop(t + absl::Seconds(21));
  Sweep(t + absl::Seconds(31));
  gen_ = job().generation();
  Take();
  SendStarted(t + absl::Seconds(32), a_);
  SendStarted(t + absl::Seconds(32), b_);
  SupervisorOutput out = CrashOnNodeA(t + absl::Seconds(40));

  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
  EXPECT_TRUE(out.journal.nodes.empty());
  EXPECT_TRUE(out.fences.empty());
}

// ---------------------------------------------------------------------------
// Finished

TEST_F(LifecycleTest, AllAgentsExitingZeroFinishTheJobWithoutARestart) {
  Start();
  StepAll(AtS(1), 1);
  StepAll(AtS(2), 2);
  Take();
  SendLauncherExit(AtS(10), a_, 0);
  Sweep(AtS(10));
  EXPECT_EQ(state(), "running");  // node-b still runs
  SendLauncherExit(AtS(11), b_, 0);
  Sweep(AtS(11));

  EXPECT_EQ(state(), "finished");
  SupervisorOutput out = Take();
  EXPECT_TRUE(Describe(out.commands).empty());
  EXPECT_TRUE(OfKind(out.events, EventKind::kCrash).empty());
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "finished");
  EXPECT_THAT(out.journal.jobs[0].reason, HasSubstr("exited 0 on all 2 nodes"));

  Sweep(AtS(100));
  Sweep(AtS(1000));
  SupervisorOutput later = Take();
  EXPECT_TRUE(Describe(later.commands).empty());
  EXPECT_TRUE(later.journal.empty());
  EXPECT_EQ(job().generation(), 1u);
  EXPECT_EQ(state(), "finished");
}

// Back to back on the same hosts (two srun steps of one batch script, or
// the next job Slurm puts on the node): the next job's agents say hello with
// the same node names before this job's sweep. The job ends from what its
// own nodes said, whatever its nodes' names serve next.
TEST_F(LifecycleTest, AJobWhoseNodesPassToTheNextJobBeforeItsSweepStillFinishes) {
  Start();
  StepAll(AtS(1), 1);
  Take();
  EndOnBothNodesAndPassThemOn(AtS(10), AtMs(10400));

  Sweep(AtS(11));

  EXPECT_EQ(state(), "finished");
  EXPECT_THAT(entry().lifecycle().reason, HasSubstr("exited 0 on all 2 nodes"));
  const JobView view = *sup_->ViewOf("job", AtS(11));
  EXPECT_EQ(view.nodes, 2u);  // the nodes its generation ran on
  EXPECT_EQ(sup_->Diagnose("job", AtS(11))->verdict, DiagnosisVerdict::kFinished);
  EXPECT_EQ(JobStateName(sup_->FindEntry("next")->lifecycle().state), "pending");
}

// Its first node already serves the next job while its second still runs:
// the job waits for the second, and ends with both.
TEST_F(LifecycleTest, AJobWaitsForItsOwnNodesNotForTheNamesItsNodesServeNext) {
  Start();
  StepAll(AtS(1), 1);
  SendLauncherExit(AtS(10), a_, 0);
  Disconnect(AtS(10), a_);
  const SessionId next = Connect(AtMs(10400), MakeHello("node-a", "next", 101));
  Sweep(AtS(11));
  EXPECT_EQ(state(), "running");  // node-b still runs

  // node-a runs the next job's first generation (its agent reports it).
  LauncherInfo running;
  running.state = LauncherState::kRunning;
  NodeReportInfo report;
  report.generation = 1;
  report.launcher = running;
  ASSERT_TRUE(sup_->Report(AtS(12), next, report).ok());
  SendLauncherExit(AtS(12), b_, 0);
  Sweep(AtS(12));

  EXPECT_EQ(state(), "finished");
  EXPECT_THAT(entry().lifecycle().reason, HasSubstr("exited 0 on all 2 nodes"));
}

// The negative control: a node whose agent left with its command running
// (a lost host) says nothing of the generation's end, even once its name
// serves another job.
TEST_F(LifecycleTest, ANodeThatLeftWithItsCommandRunningKeepsItsJobFromFinishing) {
  Start();
  StepAll(AtS(1), 1);
  SendLauncherExit(AtS(10), a_, 0);
  Disconnect(AtS(10), a_);
  Disconnect(AtS(10), b_);  // its command still running
  Connect(AtS(11), MakeHello("node-b", "next", 102));
  Sweep(AtS(11));
  EXPECT_EQ(state(), "running");
}

// A job whose command never reports a rank (`sleep`) stays pending while it
// runs; it still finishes when its commands exit 0, names passed on or not.
TEST_F(LifecycleTest, APendingJobWhoseCommandsExitedZeroFinishesAfterItsNodesPassOn) {
  Start();
  EndOnBothNodesAndPassThemOn(AtS(2), AtMs(2300));

  Sweep(AtS(3));

  EXPECT_EQ(state(), "finished");
}

// `trainsupctl nodes`: a node's ranks and heartbeats are those of the job it
// serves now, not the sum over every job its name served.
TEST_F(LifecycleTest, ANodeShowsTheRanksAndHeartbeatsOfItsCurrentJobOnly) {
  Start();
  StepAll(AtS(1), 1);
  StepAll(AtS(2), 2);
  SendLauncherExit(AtS(3), a_, 0);
  Disconnect(AtS(3), a_);
  const SessionId next = Connect(AtS(4), MakeHello("node-a", "next", 101));
  std::vector<Heartbeat> hbs;
  for (uint32_t rank : {0u, 1u}) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, rank, 1, kWorld, 1);
    hb.job = "next";
    hbs.push_back(hb);
  }
  NodeReportInfo report;
  report.generation = 1;
  report.launcher.state = LauncherState::kRunning;
  report.heartbeats = hbs;
  ASSERT_TRUE(sup_->Report(AtS(5), next, report).ok());

  for (const NodeView& node : sup_->NodeViews()) {
    if (node.name != "node-a") continue;
    EXPECT_EQ(node.job, "next");
    EXPECT_EQ(node.generation, 1u);
    EXPECT_EQ(node.ranks, 2u);       // not 4: job's ranks 0, 1 are no longer its
    EXPECT_EQ(node.heartbeats, 2u);  // the next job's only
  }
}

TEST_F(LifecycleTest, OneAgentExitingNonZeroIsACrashNotAFinish) {
  Start();
  StepAll(AtS(1), 1);
  SendLauncherExit(AtS(10), a_, 0);
  SendLauncherExit(AtS(10), b_, 1);
  Sweep(AtS(11));
  EXPECT_EQ(state(), "stopping");
  EXPECT_EQ(OfKind(Take().events, EventKind::kCrash).size(), 1u);
}

// ---------------------------------------------------------------------------
// World size change

// Generation 1 on both nodes (4 ranks x 8 samples); node-b lost while the
// crash on node-a stops it; generation 2 starts on node-a's 2 ranks at 18 s.
class WorldSizeTest : public LifecycleTest {
 protected:
  void RunOnNodeAAlone() {
    Start();
    StepAll(AtS(1), 1);
    CrashOnNodeA(AtS(10));
    SendLauncherExit(AtS(12), a_, 1);
    Disconnect(AtS(12), b_);
    Sweep(AtS(12));
    Sweep(AtS(17));
    ASSERT_EQ(job().generation(), 2u);
    gen_ = 2;
    world_ = 2;
    SendStarted(AtS(18), a_);
  }

  // Rank `rank`'s STEP `step`, 8 samples.
  Heartbeat StepOf(uint32_t rank, int64_t step) const {
    Heartbeat hb = Hb(HeartbeatKind::kStep, rank, step);
    hb.step_duration_s = 1.0;
    hb.samples = 8;
    return hb;
  }
};

TEST_F(WorldSizeTest, FewerRanksInTheNextGenerationIsOneWorldSizeChangedEvent) {
  RunOnNodeAAlone();
  Take();
  SendStep(AtS(19), a_, 1, /*samples=*/8);
  Sweep(AtS(19));
  SendStep(AtS(20), a_, 2, /*samples=*/8);
  Sweep(AtS(20));

  std::vector<Event> changed = OfKind(sup_->events().Since(0, "job"),
                                      EventKind::kWorldSizeChanged);
  ASSERT_EQ(changed.size(), 1u);
  const Event& e = changed[0];
  EXPECT_EQ(e.generation, 2u);
  EXPECT_EQ(Figure(e, "old_world_size"), 4.0);
  EXPECT_EQ(Figure(e, "new_world_size"), 2.0);
  EXPECT_EQ(Figure(e, "old_global_batch"), 32.0);
  EXPECT_EQ(Figure(e, "new_global_batch"), 16.0);
}

// A rank's first reports can trail the generation's first step by seconds
// on a loaded host (CI run 6: 64 samples judged from one of two ranks where
// the batch was 128): the new batch is summed once every rank has stepped,
// or, for a rank that never does, after 10 s.
TEST_F(WorldSizeTest, TheNewGlobalBatchWaitsForEveryRanksFirstStep) {
  RunOnNodeAAlone();
  const std::vector<uint32_t> ranks = RanksOf(a_);
  ASSERT_EQ(ranks.size(), 2u);
  Send(AtS(19), a_, {StepOf(ranks[0], 1)});
  Sweep(AtS(19));
  Send(AtS(20), a_, {StepOf(ranks[0], 2)});
  Sweep(AtS(20));
  EXPECT_EQ(entry().event_count(EventKind::kWorldSizeChanged), 0u);  // one rank heard
  Send(AtS(21), a_, {StepOf(ranks[1], 1), StepOf(ranks[1], 2)});
  Sweep(AtS(21));
  std::vector<Event> changed = OfKind(sup_->events().Since(0, "job"),
                                      EventKind::kWorldSizeChanged);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(Figure(changed[0], "new_global_batch"), 16.0);
}

TEST_F(WorldSizeTest, ARankThatNeverStepsHoldsTheWorldSizeEventTenSecondsAtMost) {
  RunOnNodeAAlone();
  Send(AtS(19), a_, {StepOf(RanksOf(a_)[0], 1)});
  Sweep(AtS(28.9));
  EXPECT_EQ(entry().event_count(EventKind::kWorldSizeChanged), 0u);
  Sweep(AtS(29));
  std::vector<Event> changed = OfKind(sup_->events().Since(0, "job"),
                                      EventKind::kWorldSizeChanged);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(Figure(changed[0], "new_global_batch"), 8.0);  // the part that was heard
}

TEST_F(LifecycleTest, SameWorldSizeInTheNextGenerationIsNoWorldSizeEvent) {
  Start();
  StepAll(AtS(1), 1);
  CrashAndRestart(AtS(10), absl::Seconds(5));
  StepAll(AtS(30), 2);
  Sweep(AtS(30));
  EXPECT_EQ(entry().event_count(EventKind::kWorldSizeChanged), 0u);
  EXPECT_EQ(entry().event_count(EventKind::kRecovered), 1u);
}

// ---------------------------------------------------------------------------
// Restore

class RestoreTest : public LifecycleTest {
 protected:
  void SetUp() override {
    LifecycleTest::SetUp();
    options_.restart.limit = 2;
    options_.quarantine.after = 2;
    options_.quarantine.max_fraction = 1.0;  // the cap stays out of the way
    gen_ = 3;
  }

  // What the store gave back, at `now_`: job "job" running generation 3;
  // node-c quarantined; one failure of node-a within the window.
  PersistedState State() const {
    PersistedState s;
    s.jobs.push_back({"job", 3, "running", "generation 3 started", kWorld,
                      now_ - absl::Minutes(5)});
    s.nodes.push_back({"node-c", true, "2 failures within 1h: crash", now_ - absl::Minutes(30),
                       "policy"});
    s.failures.push_back({now_ - absl::Minutes(20), "job", 2, "crash", "node-a", 0u,
                          "crash of rank 0 (exit code 1)"});
    return s;
  }

  // Two restarts within the window (given out of order), and no failure
  // row (so that no quarantine gets in the way).
  static void AddRestarts(PersistedState& s, absl::Time now) {
    s.failures.clear();
    s.restarts.push_back({now - absl::Minutes(5), "job", 2, 3, "crash"});
    s.restarts.push_back({now - absl::Minutes(20), "job", 1, 2, "crash"});
  }

  // Restores `state`, then node-a and node-b reconnect running generation 3
  // and report a step.
  void RestoreAndReconnect(const PersistedState& state) {
    Create();
    sup_->Restore(now_, state);
    a_ = Connect(now_ + absl::Seconds(1), "node-a", 3u);
    b_ = Connect(now_ + absl::Seconds(1), "node-b", 3u);
    StepAll(now_ + absl::Seconds(2), 100);
    Sweep(now_ + absl::Seconds(2));
  }

  const absl::Time now_ = AtS(100000);
};

TEST_F(RestoreTest, JobIsBackAtItsGenerationAndRunning) {
  Create();
  sup_->Restore(now_, State());
  ASSERT_NE(sup_->FindJob("job"), nullptr);
  EXPECT_EQ(job().generation(), 3u);
  EXPECT_EQ(state(), "running");
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().reason, "generation 3 started");
}

TEST_F(RestoreTest, ReconnectingAgentsOfTheCurrentGenerationGetNoCommand) {
  PersistedState s = State();
  AddRestarts(s, now_);
  Create();
  sup_->Restore(now_, s);
  Take();
  Supervisor::HelloResult ra, rb;
  a_ = Connect(now_ + absl::Seconds(1), "node-a", 3u, &ra);
  b_ = Connect(now_ + absl::Seconds(1), "node-b", 3u, &rb);
  EXPECT_TRUE(ra.launch);
  EXPECT_EQ(ra.generation, 3u);
  EXPECT_EQ(rb.generation, 3u);
  StepAll(now_ + absl::Seconds(2), 100);
  Sweep(now_ + absl::Seconds(2));
  StepAll(now_ + absl::Seconds(3), 101);
  Sweep(now_ + absl::Seconds(4));

  SupervisorOutput out = Take();
  EXPECT_TRUE(Describe(out.commands).empty()) << ::testing::PrintToString(Describe(out.commands));
  EXPECT_TRUE(out.journal.restarts.empty());
  EXPECT_TRUE(OfKind(out.events, EventKind::kRestart).empty());
  EXPECT_TRUE(OfKind(out.events, EventKind::kRecovered).empty());
  EXPECT_EQ(job().generation(), 3u);
  EXPECT_EQ(state(), "running");
}

TEST_F(RestoreTest, QuarantinedNodeStaysQuarantined) {
  Create();
  sup_->Restore(now_, State());
  Take();
  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-c"));

  Supervisor::HelloResult result;
  Connect(now_ + absl::Seconds(1), "node-c", std::nullopt, &result);

  EXPECT_FALSE(result.launch);
  EXPECT_THAT(Describe(Take().commands), ::testing::ElementsAre("quarantine node-c gen 3"));
}

TEST_F(RestoreTest, PendingFencesOfQuarantinedNodesAreDecidedAgain) {
  PersistedState s = State();
  s.fences.push_back({"node-c", "2 failures within 1h: crash", now_ - absl::Minutes(30), true});
  s.fences.push_back({"node-a", "lifted since", now_ - absl::Minutes(40), true});  // not quarantined
  Create();
  sup_->Restore(now_, s);

  SupervisorOutput out = Take();
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-c");
  EXPECT_EQ(out.fences[0].reason, "2 failures within 1h: crash");
  bool cleared_a = false;
  for (const FenceRow& f : out.journal.fences) cleared_a |= f.node == "node-a" && !f.pending;
  EXPECT_TRUE(cleared_a);
}

TEST_F(RestoreTest, PendingUnfencesOfReleasedNodesAreDecidedAgainWithAnUnfenceCommand) {
  PersistedState s = State();
  s.nodes.push_back({"node-a", false, "quarantine lifted by an operator", now_ - absl::Minutes(10),
                     "operator"});
  s.fences.push_back({"node-a", "quarantine lifted by an operator", now_ - absl::Minutes(10), true,
                      FenceAction::kUnfence});
  // An unfence row for a node quarantined since: the node stays fenced.
  s.fences.push_back({"node-c", "lifted before", now_ - absl::Minutes(40), true,
                      FenceAction::kUnfence});

  options_.unfence = true;
  Create();
  sup_->Restore(now_, s);
  SupervisorOutput out = Take();
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-a");
  EXPECT_EQ(out.fences[0].action, FenceAction::kUnfence);
  bool cleared_c = false;
  for (const FenceRow& f : out.journal.fences) cleared_c |= f.node == "node-c" && !f.pending;
  EXPECT_TRUE(cleared_c);

  // Restarted without --unfence-command: nothing to run, the row is dropped.
  options_.unfence = false;
  Create();
  sup_->Restore(now_, s);
  out = Take();
  EXPECT_TRUE(out.fences.empty());
  bool cleared_a = false;
  for (const FenceRow& f : out.journal.fences) cleared_a |= f.node == "node-a" && !f.pending;
  EXPECT_TRUE(cleared_a);
}

TEST_F(RestoreTest, ASucceededFenceIsClearedAFailedOneStaysPending) {
  PersistedState s = State();
  s.fences.push_back({"node-c", "2 failures within 1h: crash", now_ - absl::Minutes(30), true});
  Create();
  sup_->Restore(now_, s);
  const std::vector<FenceRequest> fences = Take().fences;
  ASSERT_EQ(fences.size(), 1u);

  sup_->FenceDone(now_, fences[0], false, "exit code 1");
  EXPECT_TRUE(Take().journal.fences.empty());

  sup_->FenceDone(now_, fences[0], true, "exit code 0");
  SupervisorOutput out = Take();
  ASSERT_EQ(out.journal.fences.size(), 1u);
  EXPECT_EQ(out.journal.fences[0].node, "node-c");
  EXPECT_FALSE(out.journal.fences[0].pending);
}

TEST_F(RestoreTest, RestoredRestartsCountTowardsTheCap) {
  PersistedState s = State();
  AddRestarts(s, now_);
  RestoreAndReconnect(s);
  Take();

  CrashOnNodeA(now_ + absl::Seconds(10));
  SupervisorOutput out = BothStop(now_ + absl::Seconds(12));

  EXPECT_EQ(state(), "held");
  ASSERT_EQ(OfKind(out.events, EventKind::kHold).size(), 1u);
  EXPECT_EQ(Figure(OfKind(out.events, EventKind::kHold)[0], "restarts_in_window"), 2.0);
}

TEST_F(RestoreTest, RestoredResumeAfterTheRestartsForgivesThem) {
  PersistedState s = State();
  AddRestarts(s, now_);
  Event resume;
  resume.id = 7;
  resume.time = now_ - absl::Minutes(2);
  resume.kind = EventKind::kResume;
  resume.job = "job";
  resume.generation = 3;
  resume.message = "resumed by an operator";
  s.events.push_back(resume);
  RestoreAndReconnect(s);
  Take();

  CrashOnNodeA(now_ + absl::Seconds(10));
  BothStop(now_ + absl::Seconds(12));

  EXPECT_EQ(state(), "restarting");
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().restart_at,
            now_ + absl::Seconds(17));  // initial backoff
}

TEST_F(RestoreTest, ResumeKeptWithTheJobForgivesRestartsWithoutItsEvent) {
  // The resume's event is gone from the store's recent events; the job row
  // still says when it was.
  PersistedState s = State();
  AddRestarts(s, now_);
  s.jobs[0].restarts_forgiven_before = now_ - absl::Minutes(2);
  RestoreAndReconnect(s);
  Take();

  CrashOnNodeA(now_ + absl::Seconds(10));
  BothStop(now_ + absl::Seconds(12));

  EXPECT_EQ(state(), "restarting");
  EXPECT_EQ(sup_->FindEntry("job")->lifecycle().restart_at, now_ + absl::Seconds(17));
}

TEST_F(RestoreTest, ResumeIsJournaledWithTheJob) {
  PersistedState s = State();
  AddRestarts(s, now_);
  RestoreAndReconnect(s);
  CrashOnNodeA(now_ + absl::Seconds(10));
  BothStop(now_ + absl::Seconds(12));
  ASSERT_EQ(state(), "held");
  Take();

  ASSERT_TRUE(sup_->Resume(now_ + absl::Seconds(20), "job").ok());

  const SupervisorOutput out = Take();
  ASSERT_FALSE(out.journal.jobs.empty());
  EXPECT_EQ(out.journal.jobs.back().restarts_forgiven_before, now_ + absl::Seconds(20));
}

TEST_F(RestoreTest, RestoredEventsKeepTheirIdsAndNewOnesFollow) {
  PersistedState s = State();
  Event old;
  old.id = 41;
  old.time = now_ - absl::Minutes(2);
  old.kind = EventKind::kCrash;
  old.job = "job";
  old.message = "restored";
  s.events.push_back(old);
  RestoreAndReconnect(s);
  std::vector<Event> events = Take().events;
  for (const Event& e : CrashOnNodeA(now_ + absl::Seconds(10)).events) events.push_back(e);

  // Putting back is not happening again: the restored event is not in the
  // output, and what happened since is numbered from 42 on.
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].id, 42u + i);
    EXPECT_NE(events[i].message, "restored");
  }
  EXPECT_EQ(sup_->events().Since(0, "job").front().id, 41u);
  EXPECT_EQ(sup_->events().Since(0, "job").front().message, "restored");
}

TEST_F(RestoreTest, RestoredFailureWithinTheWindowCountsTowardsQuarantine) {
  RestoreAndReconnect(State());
  Take();
  ASSERT_FALSE(sup_->quarantine().IsQuarantined("node-a"));

  SupervisorOutput out = CrashOnNodeA(now_ + absl::Seconds(10));

  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-a"));
  ASSERT_EQ(out.journal.nodes.size(), 1u);
  EXPECT_EQ(out.journal.nodes[0].name, "node-a");
  EXPECT_EQ(out.journal.nodes[0].changed_by, "policy");
}

TEST_F(RestoreTest, RestoredFailureOlderThanTheWindowDoesNotCount) {
  PersistedState s = State();
  s.failures[0].time = now_ - absl::Hours(2);
  RestoreAndReconnect(s);
  Take();

  SupervisorOutput out = CrashOnNodeA(now_ + absl::Seconds(10));

  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
  EXPECT_TRUE(out.journal.nodes.empty());
}

TEST_F(RestoreTest, LedgerAndMeasuredCostsSurviveARestart) {
  PersistedState s = State();
  JobMeasuresRow m;
  m.job = "job";
  m.ledger.start = now_ - absl::Hours(1);
  m.ledger.last = now_ - absl::Minutes(1);
  m.ledger.generation = 3;
  m.ledger.high_water_step = 99;
  m.ledger.by_generation[3].seconds = {3000, 100, 50, 250};
  m.checkpoint_costs = {12, 14};
  m.restart_costs = {40};
  s.measures.push_back(m);
  Create();
  sup_->Restore(now_, s);

  const JobEntry& e = entry();
  EXPECT_EQ(e.ledger().totals().seconds[static_cast<int>(Bucket::kUseful)], 3000);
  EXPECT_EQ(e.ledger().totals().wall_seconds(), 3400);
  const JobView view = *sup_->ViewOf("job", now_);
  EXPECT_TRUE(view.checkpoint_cost.measured);
  EXPECT_EQ(view.checkpoint_cost.seconds, 12);
  EXPECT_TRUE(view.restart_cost.measured);
  EXPECT_EQ(view.restart_cost.seconds, 40);
  // And they are journaled again with the job.
  Take();
  a_ = Connect(now_ + absl::Seconds(1), "node-a", 3u);
  b_ = Connect(now_ + absl::Seconds(1), "node-b", 3u);
  StepAll(now_ + absl::Seconds(2), 100);
  Sweep(now_ + absl::Minutes(2));
  const SupervisorOutput out = Take();
  ASSERT_FALSE(out.journal.measures.empty());
  EXPECT_EQ(out.journal.measures.back().checkpoint_costs, (std::vector<double>{12, 14}));
}

TEST_F(RestoreTest, RestoredFailureNotChargedToItsNodeDoesNotCount) {
  PersistedState s = State();
  s.failures[0].charged = false;  // e.g. the training code's own error
  RestoreAndReconnect(s);
  Take();

  SupervisorOutput out = CrashOnNodeA(now_ + absl::Seconds(10));

  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
  EXPECT_TRUE(out.journal.nodes.empty());
}

// Failures before an operator lifted a node's quarantine do not count after
// a supervisor restart, as they would not without it.
TEST_F(RestoreTest, FailuresBeforeAnUnquarantineDoNotCountAfterRestore) {
  PersistedState s = State();
  s.nodes.push_back({"node-a", false, "lifted by an operator", now_ - absl::Minutes(10),
                     "operator"});
  RestoreAndReconnect(s);
  Take();

  CrashOnNodeA(now_ + absl::Seconds(10));

  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
}

// ---------------------------------------------------------------------------
// Hello of fresh agents

// A fresh agent's welcome says launch: that is its start, and no separate
// start of the same generation follows (it would relaunch a generation whose
// first launch already ended).
TEST_F(LifecycleTest, FreshAgentToldToLaunchGetsNoSeparateStart) {
  Create();
  Supervisor::HelloResult result;
  Connect(AtS(0), "node-a", std::nullopt, &result);
  ASSERT_TRUE(result.launch);
  EXPECT_TRUE(Describe(Take().commands).empty());
}

}  // namespace
}  // namespace trainsup
