// The training signals through the Supervisor, as its agents drive it: a
// non-finite loss stops the generation on every node and restarts it (or is
// only reported), the same one at the same step again holds the job, a
// replica that disagrees is charged to its node until it is quarantined,
// a resume behind the last complete checkpoint is reported (its repeated
// steps lost), the script's settings are checked, and a healthy run says
// nothing.
#include <cmath>
#include <cstdint>
#include <limits>
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

using ::testing::IsEmpty;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using ::trainsup::testing::AtS;

// Which kinds are training signals or resume findings (docs/signals.md).
bool IsSignal(EventKind kind) {
  const EventFamily family = EventKindInfoOf(kind).family;
  return family == EventFamily::kSignal || family == EventFamily::kResume;
}

class SignalsTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    options_.restart.backoff_initial = absl::Seconds(1);
    options_.signals.replica.rearm_steps = 5;
    Create();
    ConnectAgents(AtS(0));
  }

  // Every rank of both nodes completes `step` at `now`, with a healthy
  // loss, gradient norm and digest unless `loss_of` / `digest_of` say
  // otherwise.
  void StepAll(absl::Time now, int64_t step, double (*loss_of)(uint32_t, int64_t) = nullptr,
               uint64_t (*digest_of)(uint32_t, int64_t) = nullptr) {
    for (SessionId session : {a_, b_}) {
      SendStep(now, session, step, [&](Heartbeat& hb) {
        hb.step_duration_s = 0.5;
        hb.loss = loss_of ? loss_of(hb.rank, step) : 2.0 + 4.0 / (1 + step);
        hb.grad_norm = 1.0;
        hb.replica_digest = digest_of ? digest_of(hb.rank, step) : static_cast<uint64_t>(step);
      });
    }
  }

  // Steps [from, to), one every 0.5s from `start`, each followed by a sweep;
  // returns when it ended.
  absl::Time Steps(absl::Time start, int64_t from, int64_t to,
                   double (*loss_of)(uint32_t, int64_t) = nullptr,
                   uint64_t (*digest_of)(uint32_t, int64_t) = nullptr) {
    absl::Time t = start;
    for (int64_t step = from; step < to && (state() == "running" || state() == "pending");
         ++step) {
      t += absl::Milliseconds(500);
      StepAll(t, step, loss_of, digest_of);
      Sweep(t);
    }
    return t;
  }

  // Every rank of both nodes ends a checkpoint of `step` at `now`.
  void CheckpointAll(absl::Time now, int64_t step) {
    for (SessionId session : {a_, b_}) {
      std::vector<Heartbeat> hbs;
      for (uint32_t r : RanksOf(session)) hbs.push_back(Hb(HeartbeatKind::kCheckpointEnd, r, step));
      Send(now, session, hbs);
    }
  }

  std::vector<Event> Events(EventKind kind) {
    return OfKind(sup_->events().Since(0, "job"), kind);
  }
};

double NaNOnRank3At40(uint32_t rank, int64_t step) {
  return rank == 3 && step >= 40 ? kNaN : 2.0;
}

TEST_F(SignalsTest, ANonFiniteLossStopsTheGenerationOnEveryNodeAndRestartsIt) {
  absl::Time t = Steps(AtS(0), 0, 60, NaNOnRank3At40);
  // Reported a settle (1s) after it was heard: two sweeps later.
  std::vector<Event> found = Events(EventKind::kNotFinite);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 3u);
  EXPECT_EQ(found[0].node, "node-b");
  EXPECT_EQ(found[0].generation, 1u);
  EXPECT_EQ(Figure(found[0], "step"), 40.0);
  EXPECT_EQ(Figure(found[0], "restart"), 1.0);
  EXPECT_EQ(state(), "stopping");
  // Both agents are told to stop at once.
  const SupervisorOutput out = sup_->TakeOutput();
  int stops = 0;
  for (const AgentCommand& c : out.commands) stops += c.kind == AgentCommand::Kind::kStop;
  EXPECT_EQ(stops, 2);
  ASSERT_FALSE(out.journal.failures.empty());
  EXPECT_EQ(out.journal.failures.back().kind, "not_finite");
  EXPECT_FALSE(out.journal.failures.back().charged);  // the training's, not the node's

  // Stopped everywhere; the next generation starts and trains from its
  // checkpoint, and the same NaN at the same step holds the job: restarting
  // from that checkpoint would only repeat it.
  for (SessionId s : {a_, b_}) SendLauncherExit(t + absl::Seconds(1), s, 0, 15);
  for (int i = 0; i < 10 && job().generation() == 1; ++i) Sweep(t + absl::Seconds(2 + i));
  ASSERT_EQ(job().generation(), 2u);
  gen_ = 2;
  for (SessionId s : {a_, b_}) SendStarted(t + absl::Seconds(12), s);
  Steps(t + absl::Seconds(12), 30, 60, NaNOnRank3At40);
  found = Events(EventKind::kNotFinite);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].generation, 2u);
  EXPECT_EQ(Figure(found[1], "workload_repeat"), 1.0);
  for (SessionId s : {a_, b_}) SendLauncherExit(t + absl::Seconds(30), s, 0, 15);
  Sweep(t + absl::Seconds(31));
  EXPECT_EQ(state(), "held");
}

TEST_F(SignalsTest, ReportOnlyLeavesTheJobRunning) {
  options_.signals.non_finite.action = NonFiniteAction::kReport;
  Create();
  ConnectAgents(AtS(0));
  Steps(AtS(0), 0, 60, NaNOnRank3At40);
  std::vector<Event> found = Events(EventKind::kNotFinite);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(Figure(found[0], "restart"), 0.0);
  EXPECT_EQ(state(), "running");
}

uint64_t Rank2Corrupted(uint32_t rank, int64_t step) {
  return rank == 2 && step >= 20 ? 0xdead : static_cast<uint64_t>(step);
}

TEST_F(SignalsTest, AReplicaThatKeepsDisagreeingIsChargedToItsNodeUntilQuarantined) {
  // Re-armed every 5 steps: node-b is charged at steps 20, 25 and 30; the
  // third charge within the hour quarantines it.
  Steps(AtS(0), 0, 40, nullptr, Rank2Corrupted);
  std::vector<Event> found = Events(EventKind::kReplicaMismatch);
  ASSERT_GE(found.size(), 3u);
  EXPECT_EQ(found[0].rank, 2u);
  EXPECT_EQ(found[0].node, "node-b");
  EXPECT_EQ(Figure(found[0], "step"), 20.0);
  EXPECT_EQ(Figure(found[0], "majority"), 3.0);
  EXPECT_EQ(Figure(found[0], "charged"), 1.0);
  std::vector<Event> quarantined = Events(EventKind::kQuarantine);
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_EQ(quarantined[0].node, "node-b");
}

TEST_F(SignalsTest, AResumeBehindTheLastCompleteCheckpointIsReportedAndItsRepeatsLost) {
  // Checkpoints after steps 19 (complete) and 29 (every rank ended it); a
  // NaN at 40 restarts; generation 2 resumes after step 19, not 29.
  absl::Time t = Steps(AtS(0), 0, 20, NaNOnRank3At40);
  CheckpointAll(t, 19);
  t = Steps(t, 20, 30, NaNOnRank3At40);
  CheckpointAll(t, 29);
  t = Steps(t, 30, 60, NaNOnRank3At40);
  ASSERT_EQ(state(), "stopping");
  EXPECT_EQ(entry().signals().last_checkpoint_step(), 29);
  for (SessionId s : {a_, b_}) SendLauncherExit(t + absl::Seconds(1), s, 0, 15);
  for (int i = 0; i < 10 && job().generation() == 1; ++i) Sweep(t + absl::Seconds(2 + i));
  ASSERT_EQ(job().generation(), 2u);
  gen_ = 2;
  for (SessionId s : {a_, b_}) SendStarted(t + absl::Seconds(12), s);
  const double lost_before = entry().ledger().totals().seconds[static_cast<int>(Bucket::kLost)];
  Steps(t + absl::Seconds(12), 20, 40, NaNOnRank3At40);  // the same losses, up to the NaN
  std::vector<Event> found = Events(EventKind::kResumedBehind);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].generation, 2u);
  EXPECT_EQ(Figure(found[0], "resumed_step"), 19.0);
  EXPECT_EQ(Figure(found[0], "checkpoint_step"), 29.0);
  EXPECT_EQ(Figure(found[0], "repeated_steps"), 10.0);
  // The same loss, learning rate and data as before at the same steps.
  EXPECT_THAT(Events(EventKind::kLrMismatch), IsEmpty());
  EXPECT_THAT(Events(EventKind::kResumeSpike), IsEmpty());
  EXPECT_EQ(entry().signals().resume_counts().repeated_steps, 10u);
  // Steps 20..39 were done before: lost, and the ledger's identity holds.
  const LedgerTotals& totals = entry().ledger().totals();
  EXPECT_GT(totals.seconds[static_cast<int>(Bucket::kLost)], lost_before);
  EXPECT_NEAR(
      totals.wall_seconds(),
      absl::ToDoubleSeconds(entry().ledger().last_step_time() - entry().ledger().first_step_time()),
      1e-9);
}

TEST_F(SignalsTest, AHealthyRunRaisesNoSignal) {
  Steps(AtS(0), 0, 400);
  for (const Event& e : sup_->events().Since(0, "job")) EXPECT_FALSE(IsSignal(e.kind)) << e.message;
}

// The job's view carries the registry's rules' state as named gauges
// (what `trainsupctl job` and the metrics read): a flat loss is 1 once
// found, the step time's ratio once the reference is known; a rule the
// script turned off says nothing, and memory no script sent has no gauge.
TEST_F(SignalsTest, TheJobsViewCarriesEachRulesGaugesAndARuleThatIsOffSaysNothing) {
  const absl::Time end = Steps(AtS(0), 0, 400, [](uint32_t, int64_t) { return 2.0; });
  const JobView view = *sup_->ViewOf("job", end);
  auto gauge = [&](const std::string& name) -> std::optional<double> {
    for (const auto& [n, value] : view.signals.gauges) {
      if (n == name) return value;
    }
    return std::nullopt;
  };
  EXPECT_EQ(gauge("loss_flat"), 1.0);
  ASSERT_TRUE(gauge("step_time_ratio").has_value());
  EXPECT_NEAR(*gauge("step_time_ratio"), 1.0, 0.05);
  EXPECT_FALSE(gauge("device_memory_growth_bytes_per_second").has_value());
  EXPECT_FALSE(view.signals.device_memory_bytes.has_value());
  EXPECT_THAT(OfKind(sup_->events().Since(0, "job"), EventKind::kLossFlat), ::testing::SizeIs(1));

}

TEST_F(SignalsTest, ARuleTheScriptTurnedOffHasNoGaugeAndNoEvent) {
  Heartbeat start = Hb(HeartbeatKind::kStart, 0, 0);
  start.signal_settings = {{"loss_flat", 0}};
  Send(AtS(1), a_, {start});
  const absl::Time end = Steps(AtS(1), 0, 400, [](uint32_t, int64_t) { return 2.0; });
  const JobView view = *sup_->ViewOf("job", end);
  bool ratio = false;
  for (const auto& [n, value] : view.signals.gauges) {
    EXPECT_NE(n, "loss_flat");
    ratio = ratio || n == "step_time_ratio";
  }
  EXPECT_TRUE(ratio);  // the other rules still say theirs
  EXPECT_THAT(OfKind(sup_->events().Since(0, "job"), EventKind::kLossFlat), IsEmpty());
}

TEST_F(SignalsTest, TheScriptsSettingsArriveInItsStartAndBadOnesAreRefused) {
  Heartbeat start = Hb(HeartbeatKind::kStart, 0, 0);
  start.signal_settings = {{"non_finite", 1}, {"loss_flat", 0}};
  Send(AtS(1), a_, {start});
  const JobEntry& e = entry();
  EXPECT_EQ(e.signals().options().non_finite.action, NonFiniteAction::kReport);
  EXPECT_FALSE(e.signals().options().loss_flat.enabled);

  Heartbeat bad = Hb(HeartbeatKind::kStart, 1, 0);
  bad.signal_settings = {{"loss_flat", 7}};
  Send(AtS(1), a_, {bad});
  EXPECT_EQ(sup_->rejected().Get(RejectReason::kBadSignal), 1u);
  // The first START with settings holds for the generation.
  Steps(AtS(1), 0, 60, NaNOnRank3At40);
  EXPECT_EQ(state(), "running");
  EXPECT_EQ(Events(EventKind::kNotFinite).size(), 1u);
}

}  // namespace
}  // namespace trainsup
