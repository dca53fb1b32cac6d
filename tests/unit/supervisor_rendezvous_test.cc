// Where a job meets, driven through the Supervisor as its agents do: the
// first agent to launch hosts torchrun's rendezvous store and the others are
// told to meet there; when the host is lost, the next generation meets on a
// survivor; a generation that never makes its first step (its rendezvous
// cannot complete) is a start_timeout failure, restarted like any other.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

using ::trainsup::testing::AtS;

class RendezvousTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    options_.node_loss.lost_after = absl::Seconds(15);
    options_.restart.backoff_initial = absl::Seconds(1);
    options_.start_timeout = absl::Seconds(60);
    Create();
  }

  // A fresh agent on `node` that offers to host at `address`:`port`.
  SessionId ConnectOffering(absl::Time now, const std::string& node, const std::string& address,
                            uint32_t port, Supervisor::HelloResult* result) {
    AgentHelloInfo hello = HelloOf(node);
    RendezvousOffer offer;
    offer.address = address;
    offer.port = port;
    hello.rendezvous = offer;
    return Connect(now, hello, result);
  }

  // node-b says hello first, then node-a: node-b hosts generation 1.
  void ConnectBothOffering(absl::Time now) {
    b_ = ConnectOffering(now, "node-b", "10.0.0.2", 4002, &welcome_b_);
    a_ = ConnectOffering(now, "node-a", "10.0.0.1", 4001, &welcome_a_);
    gen_ = job().generation();
  }

  void StepAll(absl::Time now, int64_t step) {
    for (SessionId session : {a_, b_}) {
      std::vector<Heartbeat> hbs;
      std::vector<RankProcessInfo> processes;
      for (uint32_t r : RanksOf(session)) {
        Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
        hb.step_duration_s = 1.0;
        hbs.push_back(hb);
        processes.push_back(Alive(r));
      }
      Send(now, session, hbs, processes);
    }
  }

  std::vector<Event> Events(EventKind kind) const {
    return OfKind(sup_->events().Since(0, "job"), kind);
  }

  // The start commands taken from the supervisor's output.
  std::vector<AgentCommand> Starts() {
    std::vector<AgentCommand> starts;
    for (AgentCommand& c : sup_->TakeOutput().commands) {
      if (c.kind == AgentCommand::Kind::kStart) starts.push_back(std::move(c));
    }
    return starts;
  }

  Supervisor::HelloResult welcome_a_;
  Supervisor::HelloResult welcome_b_;
};

TEST_F(RendezvousTest, TheFirstAgentToLaunchHostsAndTheOthersAreToldToMeetThere) {
  ConnectBothOffering(AtS(0));

  ASSERT_TRUE(welcome_b_.launch && welcome_b_.rendezvous);
  ASSERT_TRUE(welcome_a_.launch && welcome_a_.rendezvous);
  EXPECT_EQ(welcome_b_.rendezvous->host_node, "node-b");
  EXPECT_EQ(welcome_a_.rendezvous->host_node, "node-b");
  EXPECT_EQ(welcome_a_.rendezvous->address, "10.0.0.2");
  EXPECT_EQ(welcome_a_.rendezvous->port, 4002u);
  std::vector<Event> met = Events(EventKind::kRendezvous);
  ASSERT_EQ(met.size(), 1u);
  EXPECT_EQ(met[0].node, "node-b");
  EXPECT_EQ(met[0].generation, 1u);
  EXPECT_EQ(Figure(met[0], "port"), 4002.0);
  EXPECT_EQ(Figure(met[0], "moved"), 0.0);
}

TEST_F(RendezvousTest, AnAgentThatOffersNothingIsToldNothing) {
  a_ = Connect(AtS(0), "node-a", std::nullopt, &welcome_a_);
  EXPECT_TRUE(welcome_a_.launch);
  EXPECT_FALSE(welcome_a_.rendezvous);
  EXPECT_THAT(Events(EventKind::kRendezvous), IsEmpty());
}

TEST_F(RendezvousTest, AnOfferWithABadAddressIsRefused) {
  AgentHelloInfo hello = HelloOf("node-a");
  RendezvousOffer offer;
  offer.address = "no spaces";
  offer.port = 4001;
  hello.rendezvous = offer;
  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(0), hello);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RendezvousTest, WhenTheHostIsLostTheNextGenerationMeetsOnASurvivor) {
  ConnectBothOffering(AtS(0));
  SendStarted(AtS(0.5), a_);
  SendStarted(AtS(0.5), b_);
  for (int s = 1; s <= 10; ++s) StepAll(AtS(s), s);
  (void)sup_->TakeOutput();
  // node-b, the host, freezes: its agent says nothing more and node-a's
  // ranks wait in their collective.
  last_word_.erase(b_);
  absl::Time t = AtS(11);
  for (; t <= AtS(40) && state() != "stopping"; t += absl::Seconds(1)) Sweep(t);
  ASSERT_EQ(state(), "stopping");
  ASSERT_EQ(Events(EventKind::kNodeLost).size(), 1u);
  SendLauncherExit(t, a_, 0, /*signal=*/15);
  std::vector<AgentCommand> starts;
  for (; t <= AtS(80) && starts.empty(); t += absl::Seconds(1)) {
    Sweep(t);
    starts = Starts();
  }

  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].node, "node-a");
  EXPECT_EQ(starts[0].generation, 2u);
  ASSERT_TRUE(starts[0].rendezvous);
  EXPECT_EQ(starts[0].rendezvous->host_node, "node-a");
  EXPECT_EQ(starts[0].rendezvous->address, "10.0.0.1");
  EXPECT_EQ(starts[0].rendezvous->port, 4001u);
  std::vector<Event> met = Events(EventKind::kRendezvous);
  ASSERT_EQ(met.size(), 2u);
  EXPECT_EQ(met[1].node, "node-a");
  EXPECT_EQ(met[1].generation, 2u);
  EXPECT_EQ(Figure(met[1], "moved"), 1.0);
  EXPECT_THAT(met[1].message, HasSubstr("moved from node-b"));
}

TEST_F(RendezvousTest, AGenerationWithNoFirstStepByTheStartTimeoutIsAFailureAndRestarts) {
  ConnectBothOffering(AtS(0));
  // Both commands run; their rendezvous never completes: no rank reports.
  Send(AtS(1), a_);
  Send(AtS(1), b_);
  std::vector<Event> timed_out;
  absl::Time t = AtS(2);
  for (; t <= AtS(120) && timed_out.empty(); t += absl::Seconds(1)) {
    timed_out = OfKind(Sweep(t), EventKind::kStartTimeout);
  }

  ASSERT_EQ(timed_out.size(), 1u);
  // Judged at the first sweep past the timeout (strictly longer).
  EXPECT_EQ(timed_out[0].time, AtS(61));
  EXPECT_EQ(timed_out[0].generation, 1u);
  EXPECT_EQ(timed_out[0].node, "");  // no node is blamed
  EXPECT_EQ(Figure(timed_out[0], "timeout_seconds"), 60.0);
  EXPECT_EQ(Figure(timed_out[0], "waited_seconds"), 61.0);
  EXPECT_EQ(Figure(timed_out[0], "nodes_running"), 2.0);
  EXPECT_THAT(timed_out[0].message, HasSubstr("its rendezvous on node-b (10.0.0.2:4002)"));
  EXPECT_EQ(state(), "stopping");
  const SupervisorOutput out = sup_->TakeOutput();
  ASSERT_FALSE(out.journal.failures.empty());
  EXPECT_EQ(out.journal.failures.back().kind, "start_timeout");
  EXPECT_EQ(out.journal.failures.back().node, "");

  // Restarted like any other failure; it never met on node-b, so the next
  // generation meets on node-a.
  SendLauncherExit(t, a_, 0, 15);
  SendLauncherExit(t, b_, 0, 15);
  for (; t <= AtS(200) && job().generation() == 1; t += absl::Seconds(1)) Sweep(t);
  ASSERT_EQ(job().generation(), 2u);
  std::vector<Event> met = Events(EventKind::kRendezvous);
  ASSERT_EQ(met.size(), 2u);
  EXPECT_EQ(met[1].node, "node-a");
}

TEST_F(RendezvousTest, RanksThatReportBeforeTheFirstStepAreTheStallRulesNotTheStartTimeouts) {
  ConnectBothOffering(AtS(0));
  SendStarted(AtS(1), a_);
  SendStarted(AtS(1), b_);
  for (int s = 2; s <= 100; ++s) {
    EXPECT_THAT(OfKind(Sweep(AtS(s)), EventKind::kStartTimeout), IsEmpty()) << s;
  }
  EXPECT_EQ(state(), "running");
}

TEST_F(RendezvousTest, NothingLaunchedIsNoStartTimeout) {
  ConnectBothOffering(AtS(0));  // both agents wait: no command runs yet
  for (int s = 1; s <= 100; ++s) {
    EXPECT_THAT(OfKind(Sweep(AtS(s)), EventKind::kStartTimeout), IsEmpty()) << s;
  }
}

}  // namespace
}  // namespace trainsup
