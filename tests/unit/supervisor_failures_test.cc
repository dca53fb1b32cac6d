// The failures that do not announce themselves, driven through the
// Supervisor as its agents do: a node whose agent falls silent, a host that
// dies with its agent, a partition beside a hang, a bug in the training code
// that fails the same way every generation, a node that keeps failing, and a
// second agent for the same node.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

absl::Time AtMs(int64_t ms) { return absl::FromUnixSeconds(1000) + absl::Milliseconds(ms); }
absl::Time AtS(double s) { return AtMs(static_cast<int64_t>(s * 1000)); }

class FailuresTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    options_.node_loss.lost_after = absl::Seconds(15);
    options_.restart.backoff_initial = absl::Seconds(1);
    Create();
    ConnectAgents(AtS(0));
  }

  // The ranks of `sessions` complete `step`, computing it first.
  void Step(absl::Time now, int64_t step, std::vector<SessionId> sessions) {
    for (SessionId session : sessions) {
      std::vector<Heartbeat> hbs;
      std::vector<RankProcessInfo> processes;
      for (uint32_t r : RanksOf(session)) {
        hbs.push_back(Hb(HeartbeatKind::kComputeBegin, r, step));
        hbs.push_back(Hb(HeartbeatKind::kComputeEnd, r, step));
        Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
        hb.step_duration_s = 1.0;
        hbs.push_back(hb);
        processes.push_back(Alive(r));
      }
      Send(now, session, hbs, processes);
    }
  }
  void StepAll(absl::Time now, int64_t step) { Step(now, step, {a_, b_}); }

  // `rank` raised a peer's communication error (at its last step) and died.
  RankProcessInfo Victim(absl::Time now, SessionId session, uint32_t rank) {
    Heartbeat hb = Hb(HeartbeatKind::kException, rank, job().rank(rank).step);
    hb.exception_type = "RuntimeError";
    hb.exception_message = "[gloo/transport/tcp/pair.cc:598] Connection reset by peer";
    Send(now, session, {hb}, {});
    RankProcessInfo p = Died(rank, 0.0, 1);
    p.exception_seen = true;
    return p;
  }

  // The agents obey the stop; after the backoff the next generation starts
  // on the nodes given, which launch it.
  // Returns when they did.
  absl::Time Restart(absl::Time now, std::vector<SessionId> nodes) {
    for (SessionId s : nodes) SendLauncherExit(now, s, 0, /*signal=*/15);
    const uint64_t before = job().generation();
    absl::Time t = now;
    for (; job().generation() == before && t < now + absl::Minutes(5); t += absl::Seconds(1)) {
      Sweep(t);
    }
    EXPECT_EQ(job().generation(), before + 1);
    gen_ = job().generation();
    for (SessionId s : nodes) SendStarted(t, s);
    return t;
  }

  // Rank `rank` of `session` raises `type: message` at `step` and dies;
  // the others die as its victims.
  void RaiseAt(absl::Time now, SessionId session, uint32_t rank, int64_t step,
               const std::string& type, const std::string& message) {
    Heartbeat hb = Hb(HeartbeatKind::kException, rank, step);
    hb.exception_type = type;
    hb.exception_message = message;
    RankProcessInfo p = Died(rank, 0.0, 1);
    p.exception_seen = true;
    std::vector<RankProcessInfo> processes = {p};
    for (uint32_t other : RanksOf(session)) {
      if (other != rank) processes.push_back(Alive(other));
    }
    Send(now, session, {hb}, processes);
  }
};

// ---------------------------------------------------------------------------
// Losing sight of a node

TEST_F(FailuresTest, SilentAgentIsUnreachableButTheJobIsNotStoppedWhileItSteps) {
  for (int s = 1; s <= 40; ++s) {
    // node-b's agent is cut off after step 5; its ranks go on training.
    Step(AtS(s), s, s <= 5 ? std::vector<SessionId>{a_, b_} : std::vector<SessionId>{a_});
    last_word_.erase(b_);  // it says nothing more, idle or not
    Sweep(AtS(s) + absl::Milliseconds(500));
  }

  std::vector<Event> events = sup_->events().Since(0, "job");
  std::vector<Event> unreachable = OfKind(events, EventKind::kNodeUnreachable);
  ASSERT_EQ(unreachable.size(), 1u);
  EXPECT_EQ(unreachable[0].node, "node-b");
  EXPECT_EQ(Figure(unreachable[0], "ranks"), 2.0);  // 2 and 3, now of unknown liveness
  EXPECT_EQ(state(), "running");
  EXPECT_THAT(OfKind(events, EventKind::kStall), IsEmpty());
  EXPECT_THAT(OfKind(events, EventKind::kNodeLost), IsEmpty());
  EXPECT_EQ(job().rank(2).liveness, Liveness::kUnknown);
  EXPECT_TRUE(sup_->node(1).unreachable);
}

TEST_F(FailuresTest, UnreachableNodeHeardAgainIsReachableAndResyncs) {
  Step(AtS(1), 1, {a_, b_});
  last_word_.erase(b_);
  for (int s = 2; s <= 20; ++s) {
    Step(AtS(s), s, {a_});
    Sweep(AtS(s) + absl::Milliseconds(500));
  }
  ASSERT_TRUE(sup_->node(1).unreachable);

  Step(AtS(21), 21, {a_, b_});  // the partition heals

  std::vector<Event> back = OfKind(sup_->events().Since(0, "job"), EventKind::kNodeReachable);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].node, "node-b");
  EXPECT_FALSE(sup_->node(1).unreachable);
  EXPECT_EQ(job().rank(2).liveness, Liveness::kAlive);
  EXPECT_EQ(state(), "running");
}

TEST_F(FailuresTest, HangBesideAPartitionedNodeIsBlamedOnTheHungRankNotTheSilentNode) {
  for (int s = 1; s <= 5; ++s) StepAll(AtS(s), s);
  // node-b is cut off; its last word: computing step 6.
  Send(AtS(5.5), b_, {Hb(HeartbeatKind::kComputeBegin, 2, 6), Hb(HeartbeatKind::kComputeBegin, 3, 6)},
       {Alive(2), Alive(3)});
  last_word_.erase(b_);
  for (int s = 6; s <= 10; ++s) Step(AtS(s), s, {a_});
  // Rank 1 hangs in its compute of step 11; rank 0 waits in the all-reduce.
  Send(AtS(10.5), a_,
       {Hb(HeartbeatKind::kComputeBegin, 0, 11), Hb(HeartbeatKind::kComputeEnd, 0, 11),
        Hb(HeartbeatKind::kComputeBegin, 1, 11)},
       {Alive(0), Alive(1)});

  std::vector<Event> stalls;
  for (int t = 11; t <= 32 && stalls.empty(); ++t) stalls = OfKind(Sweep(AtS(t)), EventKind::kStall);

  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].rank, 1u);
  EXPECT_EQ(stalls[0].node, "node-a");
}

TEST_F(FailuresTest, StallWhoseOnlyPossibleCulpritCannotBeSeenIsThatNodeLost) {
  // A frozen host: node-b's agent and ranks stop mid-step, nothing closed.
  for (int s = 1; s <= 10; ++s) StepAll(AtS(s), s);
  last_word_.erase(b_);
  Send(AtS(10.5), a_,
       {Hb(HeartbeatKind::kComputeBegin, 0, 11), Hb(HeartbeatKind::kComputeEnd, 0, 11),
        Hb(HeartbeatKind::kComputeBegin, 1, 11), Hb(HeartbeatKind::kComputeEnd, 1, 11)},
       {Alive(0), Alive(1)});

  std::vector<Event> lost;
  absl::Time t = AtS(11);
  for (; t <= AtS(32) && lost.empty(); t += absl::Seconds(1)) {
    lost = OfKind(Sweep(t), EventKind::kNodeLost);
  }

  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node, "node-b");
  EXPECT_EQ(lost[0].rank, std::nullopt);
  EXPECT_EQ(Figure(lost[0], "lost_ranks"), 2.0);
  EXPECT_EQ(Figure(lost[0], "step"), 10.0);  // where every rank that can be seen waits
  EXPECT_EQ(state(), "stopping");
  // Charged to node-b, toward its quarantine.
  const SupervisorOutput out = sup_->TakeOutput();
  ASSERT_FALSE(out.journal.failures.empty());
  EXPECT_EQ(out.journal.failures.back().kind, "node_lost");
  EXPECT_EQ(out.journal.failures.back().node, "node-b");
  EXPECT_TRUE(out.journal.failures.back().charged);
  // The stop does not wait for the frozen agent: it cannot stop.
  SendLauncherExit(t + absl::Seconds(1), a_, 0, 15);
  Sweep(t + absl::Seconds(1));
  EXPECT_EQ(state(), "restarting");
}

TEST_F(FailuresTest, HostThatDiesWithItsAgentIsNamedNotTheVictimsNode) {
  for (int s = 1; s <= 5; ++s) StepAll(AtS(s), s);
  // node-b: agent, torchrun and ranks SIGKILLed at once; its stream resets.
  Disconnect(AtS(5.3), b_);
  // node-a's ranks die as victims ("Connection reset by peer").
  RankProcessInfo v0 = Victim(AtS(5.4), a_, 0);
  RankProcessInfo v1 = Victim(AtS(5.4), a_, 1);
  Send(AtS(5.5), a_, {}, {v0, v1});

  std::vector<Event> lost;
  for (double t = 5.6; t < 8 && lost.empty(); t += 0.2) lost = OfKind(Sweep(AtS(t)), EventKind::kNodeLost);

  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node, "node-b");
  EXPECT_EQ(Figure(lost[0], "lost_ranks"), 2.0);
  EXPECT_EQ(Figure(lost[0], "victims"), 2.0);
  EXPECT_EQ(Figure(lost[0], "first_victim"), 0.0);
  EXPECT_THAT(OfKind(sup_->events().Since(0, "job"), EventKind::kCrash), IsEmpty());
}

// ---------------------------------------------------------------------------
// Workload or node

TEST_F(FailuresTest, TheSameErrorAtTheSameStepTwiceHoldsTheJobAndChargesNoNode) {
  for (int s = 1; s <= 5; ++s) StepAll(AtS(s), s);
  RaiseAt(AtS(6), b_, 3, 5, "ValueError", "bad value in batch 7");
  Sweep(AtS(7.5));
  ASSERT_EQ(state(), "stopping");
  const absl::Time t = Restart(AtS(8), {a_, b_}) + absl::Seconds(1);
  for (int s = 1; s <= 5; ++s) StepAll(t + absl::Seconds(s), s);

  RaiseAt(t + absl::Seconds(6), b_, 3, 5, "ValueError", "bad value in batch 7");
  Sweep(t + absl::Seconds(7.5));
  std::vector<Event> crash = OfKind(sup_->events().Since(0, "job"), EventKind::kCrash);
  ASSERT_EQ(crash.size(), 2u);
  EXPECT_EQ(Figure(crash[0], "workload_repeat"), 0.0);
  EXPECT_EQ(Figure(crash[1], "workload_repeat"), 1.0);
  EXPECT_EQ(crash[1].rank, 3u);
  EXPECT_EQ(Figure(crash[1], "step"), 5.0);
  SendLauncherExit(t + absl::Seconds(8), a_, 1);
  SendLauncherExit(t + absl::Seconds(8), b_, 1);
  Sweep(t + absl::Seconds(8));

  EXPECT_EQ(state(), "held");
  std::vector<Event> hold = OfKind(sup_->events().Since(0, "job"), EventKind::kHold);
  ASSERT_EQ(hold.size(), 1u);
  EXPECT_EQ(hold[0].generation, 2u);
  EXPECT_EQ(Figure(hold[0], "workload_repeat"), 1.0);
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-b"));
  EXPECT_EQ(sup_->quarantine().quarantined_count(), 0u);
  // And an operator's resume lifts it.
  EXPECT_TRUE(sup_->Resume(t + absl::Seconds(10), "job").ok());
  EXPECT_EQ(state(), "restarting");
}

TEST_F(FailuresTest, InfrastructureErrorsThatFollowTheNodeQuarantineIt) {
  absl::Time t = AtS(1);
  for (int failure = 1; failure <= 3; ++failure) {
    for (int s = 1; s <= 3; ++s, t += absl::Seconds(1)) StepAll(t, s);
    // Whatever rank sits on node-b fails with its GPU.
    RaiseAt(t, b_, failure % 2 == 0 ? 2 : 3, 3, "RuntimeError",
            "CUDA error: unspecified launch failure");
    Sweep(t + absl::Seconds(1.5));
    if (failure < 3) t = Restart(t + absl::Seconds(2), {a_, b_}) + absl::Seconds(1);
  }
  EXPECT_TRUE(sup_->quarantine().IsQuarantined("node-b"));
  EXPECT_FALSE(sup_->quarantine().IsQuarantined("node-a"));
}

// ---------------------------------------------------------------------------
// One agent per node

TEST_F(FailuresTest, SecondAgentForANodeWhoseAgentIsHeardIsRefused) {
  StepAll(AtS(1), 1);
  AgentHelloInfo second = HelloOf("node-b");
  second.incarnation = 999;

  absl::StatusOr<Supervisor::HelloResult> r = sup_->Hello(AtS(1.5), second);

  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), HasSubstr("node node-b is served by another agent"));
  // The first goes on.
  StepAll(AtS(2), 2);
  EXPECT_TRUE(sup_->node(1).connected);
}

TEST_F(FailuresTest, AgentOfANodeWhoseAgentWentSilentTakesOver) {
  StepAll(AtS(1), 1);
  AgentHelloInfo second = HelloOf("node-b");
  second.incarnation = 999;
  EXPECT_TRUE(sup_->Hello(AtS(4), second).ok());  // 3 s of silence: gone
}

// ---------------------------------------------------------------------------
// Fencing by generation

TEST_F(FailuresTest, NodeCutFromAGenerationIsStoppedAndStartsOnlyWithTheNext) {
  for (int s = 1; s <= 5; ++s) StepAll(AtS(s), s);
  last_word_.erase(b_);
  for (int s = 6; s <= 25; ++s) {
    Step(AtS(s), s, {a_});
    Sweep(AtS(s) + absl::Milliseconds(500));
  }
  ASSERT_TRUE(sup_->node(1).unreachable);
  // node-a crashes; the job restarts without the unreachable node-b.
  Send(AtS(26), a_, {}, {Died(0, 0.1, 0, /*signal=*/11), Alive(1)});
  Sweep(AtS(27.5));
  ASSERT_EQ(state(), "stopping");
  Restart(AtS(28), {a_});
  ASSERT_EQ(job().generation(), 2u);
  const Event restart = OfKind(sup_->events().Since(0, "job"), EventKind::kRestart).back();
  EXPECT_EQ(restart.generation, 2u);
  EXPECT_EQ(Figure(restart, "nodes"), 1.0);           // node-a
  EXPECT_EQ(Figure(restart, "nodes_left_out"), 1.0);  // node-b, unreachable
  sup_->TakeOutput();

  // node-b's partition heals: its agent reconnects still running generation
  // 1. It is stopped, and not started into generation 2.
  b_ = Connect(AtS(31), "node-b", 1u);
  NodeReportInfo stale;
  stale.generation = 1;
  stale.launcher.state = LauncherState::kRunning;
  ASSERT_TRUE(sup_->Report(AtS(31), b_, stale).ok());
  Sweep(AtS(31));
  SupervisorOutput out = sup_->TakeOutput();
  std::vector<std::string> to_b;
  for (const AgentCommand& c : out.commands) {
    if (c.node == "node-b" && c.kind != AgentCommand::Kind::kPlan) {
      to_b.push_back(c.kind == AgentCommand::Kind::kStop ? "stop" : "other");
    }
  }
  EXPECT_THAT(to_b, ::testing::ElementsAre("stop"));
  NodeReportInfo stopped = stale;
  stopped.launcher.state = LauncherState::kExited;
  stopped.launcher.signal = 15;
  ASSERT_TRUE(sup_->Report(AtS(32), b_, stopped).ok());
  Sweep(AtS(32));
  for (const AgentCommand& c : sup_->TakeOutput().commands) {
    EXPECT_FALSE(c.node == "node-b" && c.kind == AgentCommand::Kind::kStart);
  }
}

}  // namespace
}  // namespace trainsup
