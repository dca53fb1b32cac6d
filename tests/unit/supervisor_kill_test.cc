// Kill criteria through the Supervisor, as its agents drive it: the
// script's criteria met stop the job on every node and leave it killed (not
// restarted) with the event, its evidence and the GPU-time saved; an
// operator's resume undoes it; observe-only only reports; the operator's
// criteria are journaled and come back after a restart.
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

using ::trainsup::testing::AtS;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

class KillTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    Create();
    ConnectAgents(AtS(0));
  }

  // Rank 0 sends the script's criteria.
  void SendCriteria(absl::Time now, const KillCriteriaSpec& spec) {
    Heartbeat hb = Hb(HeartbeatKind::kKillCriteria, 0, 0);
    hb.kill_criteria = spec;
    Send(now, a_, {hb}, {Alive(0)});
  }

  // Steps [from, to), one every 0.5s from `start`, every rank at `loss(step)`,
  // each followed by a sweep, while the job runs; returns when it ended.
  absl::Time Steps(absl::Time start, int64_t from, int64_t to, double (*loss)(int64_t)) {
    absl::Time t = start;
    for (int64_t step = from; step < to && (state() == "running" || state() == "pending");
         ++step) {
      t += absl::Milliseconds(500);
      for (SessionId session : {a_, b_}) {
        SendStep(t, session, step, [&](Heartbeat& hb) {
          hb.step_duration_s = 0.5;
          hb.loss = loss(step);
        });
      }
      Sweep(t);
    }
    return t;
  }

  std::vector<Event> Killed() {
    return OfKind(sup_->events().Since(0, "job"), EventKind::kKilledByCriterion);
  }
};

double RisesFrom100(int64_t step) { return step < 100 ? 2.0 : 4.0; }

KillCriteriaSpec AboveThreeFrom50() {
  KillCriteriaSpec spec;
  spec.loss_above = 3.0;
  spec.at_step = 50;
  spec.total_steps = 1000;
  return spec;
}

TEST_F(KillTest, ACriterionMetStopsTheJobEverywhereAndItStaysKilled) {
  SendCriteria(AtS(0.1), AboveThreeFrom50());
  absl::Time t = Steps(AtS(0), 0, 300, RisesFrom100);
  std::vector<Event> killed = Killed();
  ASSERT_EQ(killed.size(), 1u);
  // The median of the last 20 steps is above 3 once 11 of them are.
  EXPECT_EQ(Figure(killed[0], "step"), 110.0);
  EXPECT_EQ(Figure(killed[0], "onset_step"), 100.0);
  EXPECT_EQ(Figure(killed[0], "criterion"), 0.0);
  EXPECT_EQ(Figure(killed[0], "loss"), 4.0);
  EXPECT_EQ(Figure(killed[0], "limit"), 3.0);
  EXPECT_EQ(Figure(killed[0], "observe_only"), 0.0);
  EXPECT_EQ(Figure(killed[0], "remaining_steps"), 890.0);
  EXPECT_EQ(Figure(killed[0], "gpu_seconds_saved"),
            890.0 * *Figure(killed[0], "step_seconds") * job().world_size());
  EXPECT_THAT(killed[0].message, ::testing::HasSubstr("kill criterion loss_above (script)"));
  EXPECT_EQ(state(), "stopping");
  const SupervisorOutput out = sup_->TakeOutput();
  int stops = 0;
  for (const AgentCommand& c : out.commands) stops += c.kind == AgentCommand::Kind::kStop;
  EXPECT_EQ(stops, 2);
  ASSERT_FALSE(out.journal.kill_criteria.empty());
  EXPECT_EQ(out.journal.kill_criteria[0].source, "script");

  for (SessionId s : {a_, b_}) SendLauncherExit(t + absl::Seconds(1), s, 0, 15);
  for (int i = 0; i < 30; ++i) Sweep(t + absl::Seconds(2 + i));
  EXPECT_EQ(state(), "killed");
  EXPECT_EQ(job().generation(), 1u);  // not restarted
  EXPECT_EQ(entry().lifecycle().reason, "kill criterion loss_above met at step 110");

  // An operator's resume undoes it: the next generation starts.
  ASSERT_TRUE(sup_->Resume(t + absl::Seconds(40), "job").ok());
  Sweep(t + absl::Seconds(40));
  EXPECT_EQ(job().generation(), 2u);
  EXPECT_FALSE(entry().kill().fired());
}

TEST_F(KillTest, ObserveOnlyReportsAndTheJobGoesOn) {
  KillCriteriaSpec spec = AboveThreeFrom50();
  spec.observe_only = true;
  SendCriteria(AtS(0.1), spec);
  Steps(AtS(0), 0, 300, RisesFrom100);
  std::vector<Event> killed = Killed();
  ASSERT_EQ(killed.size(), 1u);  // once
  EXPECT_EQ(Figure(killed[0], "observe_only"), 1.0);
  EXPECT_EQ(state(), "running");
}

TEST_F(KillTest, AHealthyRunUnderItsCriteriaIsNeverStopped) {
  SendCriteria(AtS(0.1), AboveThreeFrom50());
  Steps(AtS(0), 0, 400, [](int64_t step) { return step % 7 == 0 ? 9.0 : 2.0; });
  EXPECT_TRUE(Killed().empty());
  EXPECT_EQ(state(), "running");
}

TEST_F(KillTest, TheOperatorsCriteriaAreJournaledAndRestored) {
  sup_->TakeOutput();
  KillCriteriaSpec spec;
  spec.curve = {{0, 2.0}, {100, 1.0}};
  spec.band = 0.2;
  absl::StatusOr<std::string> set = sup_->SetKillCriteria(AtS(1), "job", spec);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(*sup_->SetKillCriteria(AtS(1), "job", spec),
            "job job: these kill criteria are already set");
  KillCriteriaSpec bad;
  bad.band = -1;
  EXPECT_EQ(sup_->SetKillCriteria(AtS(1), "job", bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sup_->SetKillCriteria(AtS(1), "nope", spec).status().code(),
            absl::StatusCode::kNotFound);
  SupervisorOutput out = sup_->TakeOutput();
  ASSERT_EQ(out.journal.kill_criteria.size(), 1u);

  absl::StatusOr<std::vector<KillCriteriaView>> listed = sup_->KillCriteriaOf("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].source, "operator");
  EXPECT_EQ((*listed)[0].status.size(), 2u);  // the curve and the spikes

  // A new supervisor restores them from the store's rows.
  PersistedState state;
  state.jobs.push_back({"job", 1, "running", "", 4, AtS(1)});
  state.kill_criteria = out.journal.kill_criteria;
  Supervisor restored(options_);
  restored.Restore(AtS(2), state);
  listed = restored.KillCriteriaOf("job");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_TRUE((*listed)[0].spec == spec);

  // Cleared: none in force.
  EXPECT_TRUE(sup_->SetKillCriteria(AtS(3), "job", std::nullopt).ok());
  EXPECT_TRUE(sup_->KillCriteriaOf("job")->empty());
}

TEST_F(KillTest, BadScriptCriteriaAreRefused) {
  KillCriteriaSpec spec;
  spec.band = 0;
  SendCriteria(AtS(0.1), spec);
  EXPECT_EQ(entry().kill().spec(), nullptr);
}

}  // namespace
}  // namespace trainsup
