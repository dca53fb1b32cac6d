// The Supervisor's checkpoint planning and goodput ledger, driven through
// Hello/Report/Sweep as the agents' adapter does: the plans it publishes
// (checkpoint_plan events, kPlan commands), what they are computed from (the
// MTBF exposure and failures, the measured checkpoint and restart costs), the
// operator's one-off checkpoint, and where the job's wall time went.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "calc/checkpoint_planner.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/event_log.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_state.h"
#include "daemon/core/journal.h"
#include "daemon/core/mtbf_estimator.h"
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
using Kind = AgentCommand::Kind;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

constexpr double kEps = 1e-9;

using ::trainsup::testing::AtMs;
using ::trainsup::testing::AtS;

SupervisorOptions Options() {
  SupervisorOptions o = FakeAgentsOptions();
  // Many restarts, 1s apart, and no quarantine: the tests count failures.
  o.restart.limit = 100;
  o.restart.backoff_initial = absl::Seconds(1);
  o.restart.backoff_max = absl::Seconds(1);
  o.quarantine.after = 1000;
  // The planning defaults, spelled out: the expectations below use them.
  o.mtbf.prior_seconds = 24 * 3600;
  o.mtbf.confidence = 0.8;
  o.checkpoint_cost_prior = absl::Seconds(60);
  o.restart_cost_prior = absl::Minutes(5);
  o.publish.horizon = absl::Seconds(10);
  o.publish.replan_threshold = 0.2;
  o.plan_checkpoints = true;
  return o;
}

std::vector<AgentCommand> Plans(const std::vector<AgentCommand>& commands) {
  std::vector<AgentCommand> out;
  for (const AgentCommand& c : commands) {
    if (c.kind == Kind::kPlan) out.push_back(c);
  }
  return out;
}

// The plan ids each node was sent, in order.
std::map<std::string, std::vector<uint64_t>> PlanIdsByNode(const std::vector<AgentCommand>& commands) {
  std::map<std::string, std::vector<uint64_t>> out;
  for (const AgentCommand& c : Plans(commands)) out[c.node].push_back(c.plan.plan_id);
  return out;
}

// What the planner answers for C, M, R (and the step time), independently of
// the supervisor.
int64_t ExpectedIntervalSteps(double c, double m, double r, double step_s) {
  CheckpointPlanInputs in;
  in.checkpoint_seconds = c;
  in.mtbf_seconds = m;
  in.restart_seconds = r;
  absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(in);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return -1;
  // Young's T* (no asynchronous write to raise it to).
  EXPECT_NEAR(plan->interval_seconds, std::sqrt(2 * c * m), 1e-6 * plan->interval_seconds);
  return IntervalSteps(plan->interval_seconds, step_s);
}

double ConservativeMtbf(double exposure_seconds, int failures) {
  return MtbfEstimator(Options().mtbf).Estimate(exposure_seconds, failures).conservative_seconds;
}

constexpr uint32_t kWorld = 4;  // ranks 0, 1 on node-a; 2, 3 on node-b

class PlanningTest : public FakeAgentsTest {
 protected:
  void SetUp() override { options_ = Options(); }

  // Fresh agents on node-a and node-b say hello at `now`.
  void Start(absl::Time now = AtS(0)) {
    Create();
    ConnectAgents(now);
    Take();
  }

  SupervisorOutput Take() { return sup_->TakeOutput(); }

  // The agent's command ended with `exit_code` / `signal`; these agents
  // report the launcher's pid (4000) with it.
  void SendExited(absl::Time now, SessionId session, int32_t exit_code, int32_t signal = 0) {
    LauncherInfo exited;
    exited.state = LauncherState::kExited;
    exited.pid = 4000;
    exited.exit_code = exit_code;
    exited.signal = signal;
    SendWith(now, session, exited);
  }

  void StartedAll(absl::Time now) {
    SendStarted(now, a_);
    SendStarted(now, b_);
  }

  // Every rank of `session` completes `step`, measured at `duration` seconds
  // of which `data_wait` waiting on input.
  void SendStep(absl::Time now, SessionId session, int64_t step, double duration,
                double data_wait = 0) {
    std::vector<Heartbeat> hbs;
    std::vector<RankProcessInfo> processes;
    for (uint32_t r : RanksOf(session)) {
      Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
      hb.step_duration_s = duration;
      hb.data_wait_s = data_wait;
      hbs.push_back(hb);
      processes.push_back(Alive(r));
    }
    Send(now, session, hbs, processes);
  }

  void StepAll(absl::Time now, int64_t step, double duration, double data_wait = 0) {
    SendStep(now, a_, step, duration, data_wait);
    SendStep(now, b_, step, duration, data_wait);
  }

  // Steps first..last, one every `step_s` from `begin` (step `first` at
  // `begin`). Returns the time of the last one.
  absl::Time Steps(absl::Time begin, int64_t first, int64_t last, double step_s) {
    absl::Time t = begin;
    for (int64_t s = first; s <= last; ++s) {
      t = begin + absl::Milliseconds(std::llround((s - first) * step_s * 1000));
      StepAll(t, s, step_s);
    }
    return t;
  }

  // A running job at step `steps`, 0.5 s a step: started at 1s, steps from 2s.
  // Returns the time of the last step.
  absl::Time RunningJob(int64_t steps = 10, double step_s = 0.5) {
    Start(AtS(0));
    StartedAll(AtS(1));
    const absl::Time t = Steps(AtS(2), 1, steps, step_s);
    Take();
    return t;
  }

  // Rank 0 died (0.5 s before `now`, with an exit code that differs in
  // each generation, so that no failure repeats as the training code's);
  // the crash is acted on at now + 1 s, both agents stop at now + 2 s, and
  // the next generation starts at now + 3 s (backoff 1 s). Returns that time.
  absl::Time CrashAndRestart(absl::Time now) {
    Send(now, a_, {}, {Died(0, 0.5, static_cast<int32_t>(gen_ + 1)), Alive(1)});
    Sweep(now + absl::Seconds(1));
    EXPECT_EQ(state(), "stopping");
    SendExited(now + absl::Seconds(2), a_, 1);
    SendExited(now + absl::Seconds(2), b_, 0, 15);
    Sweep(now + absl::Seconds(2));
    EXPECT_EQ(state(), "restarting");
    Sweep(now + absl::Seconds(3));
    EXPECT_EQ(state(), "running");
    EXPECT_EQ(job().generation(), gen_ + 1);
    gen_ = job().generation();
    return now + absl::Seconds(3);
  }

  const JobEntry& control() const { return entry(); }
  // C and R as the planner takes them (measured, or the prior).
  double CheckpointCost(bool* measured) const {
    const CostFigure c = sup_->ViewOf("job", absl::UnixEpoch())->checkpoint_cost;
    *measured = c.measured;
    return c.seconds;
  }
  double RestartCost(bool* measured) const {
    const CostFigure r = sup_->ViewOf("job", absl::UnixEpoch())->restart_cost;
    *measured = r.measured;
    return r.seconds;
  }

  const LedgerTotals& ledger() const { return control().ledger().totals(); }
  double Seconds(Bucket b) const { return ledger().seconds[static_cast<int>(b)]; }
};

// ---------------------------------------------------------------------------
// The first plan

TEST_F(PlanningTest, RunningJobWithAStepTimeGetsAFirstPlanOnEveryAgent) {
  RunningJob(10, 0.5);  // running since 1s; step 10 at 6.5s
  Sweep(AtS(7));
  SupervisorOutput out = Take();

  // Running 6s: C and R are the priors, M the conservative MTBF with the prior.
  const int64_t interval = ExpectedIntervalSteps(60, ConservativeMtbf(6, 0), 300, 0.5);
  const int64_t horizon = 20;  // 10s of 0.5s steps
  std::vector<Event> plans = OfKind(out.events, EventKind::kCheckpointPlan);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].job, "job");
  EXPECT_EQ(Figure(plans[0], "interval_steps"), static_cast<double>(interval));
  EXPECT_EQ(Figure(plans[0], "effective_from_step"), 10.0 + horizon);
  EXPECT_EQ(Figure(plans[0], "checkpoint_measured"), 0.0);  // the priors
  EXPECT_EQ(Figure(plans[0], "restart_measured"), 0.0);

  std::vector<AgentCommand> commands = Plans(out.commands);
  ASSERT_EQ(commands.size(), 2u);
  std::vector<SessionId> sessions;
  for (const AgentCommand& c : commands) {
    sessions.push_back(c.session);
    EXPECT_EQ(c.node, c.session == a_ ? "node-a" : "node-b");
    EXPECT_EQ(c.plan.interval_steps, interval);
    EXPECT_EQ(c.plan.effective_from_step, 10 + horizon);
    EXPECT_EQ(c.plan.anchor_step, 10 + horizon);
    EXPECT_THAT(c.plan.one_off_steps, IsEmpty());
    // The first plan id of a job is the time in microseconds.
    EXPECT_EQ(c.plan.plan_id, static_cast<uint64_t>(absl::ToUnixMicros(AtS(7))));
    EXPECT_EQ(Figure(plans[0], "plan_id"), static_cast<double>(c.plan.plan_id));
  }
  EXPECT_THAT(sessions, ::testing::UnorderedElementsAre(a_, b_));
  ASSERT_EQ(control().plans().plans().size(), 1u);
  EXPECT_EQ(control().plans().plans()[0].interval_steps, interval);
  // A sanity anchor for the figures: ~22 200 s conservative MTBF, T* ~ 1633 s.
  EXPECT_NEAR(interval, 3265, 3);
}

// ---------------------------------------------------------------------------
// Plans take effect only once every agent holds them

TEST_F(PlanningTest, PlanHeldByEveryAgentIsConfirmed) {
  RunningJob(10, 0.5);
  Sweep(AtS(7));
  ASSERT_EQ(control().plans().plans().size(), 1u);
  const uint64_t id = control().plans().plans()[0].plan_id;
  EXPECT_LT(control().plans().confirmed_through(), id);  // not yet said

  Sweep(AtS(7.2));  // both agents now report holding it

  EXPECT_EQ(control().plans().confirmed_through(), id);
}

TEST_F(PlanningTest, PlanAnAgentDoesNotHoldIsRevokedBeforeItsFirstStep) {
  // node-b never writes the plan (e.g. cut off across the replan): the
  // schedule before it must stay in force for the ranks that got it too.
  absl::Time t = RunningJob(10, 0.5);
  deaf_to_plans_.insert(b_);
  Sweep(AtS(7));
  const CheckpointPlanSpec first = control().plans().plans()[0];
  ASSERT_EQ(first.effective_from_step, 30);
  Take();
  // Steps up to the guard (half the 20-step horizon) before step 30: kept.
  t = Steps(t + absl::Milliseconds(500), 11, 19, 0.5);
  Sweep(t);
  EXPECT_THAT(OfKind(Take().events, EventKind::kCheckpointPlan), IsEmpty());
  t = Steps(t + absl::Milliseconds(500), 20, 20, 0.5);
  Sweep(t);

  SupervisorOutput out = Take();
  std::vector<Event> plans = OfKind(out.events, EventKind::kCheckpointPlan);
  ASSERT_GE(plans.size(), 1u);
  EXPECT_EQ(plans[0].node, "node-b");  // it did not hold the plan
  EXPECT_EQ(Figure(plans[0], "revoked_plan_id"), static_cast<double>(first.plan_id));
  EXPECT_EQ(Figure(plans[0], "guard_steps"), 10.0);
  const std::vector<CheckpointPlanSpec>& held = control().plans().plans();
  ASSERT_GE(held.size(), 2u);
  const CheckpointPlanSpec& restated = held[1];
  EXPECT_GT(restated.plan_id, first.plan_id);
  EXPECT_EQ(restated.effective_from_step, first.effective_from_step);
  EXPECT_EQ(restated.interval_steps, 0);  // no plan before it: no checkpoints
  // The ranks that got the first plan and those that did not agree on every
  // step from its start on.
  const std::vector<CheckpointPlanSpec> without_first(held.begin() + 1, held.end());
  for (int64_t step = 20; step < 40; ++step) {
    EXPECT_EQ(ShouldCheckpoint({first, restated}, step), ShouldCheckpoint({restated}, step))
        << step;
  }
}

TEST_F(PlanningTest, NoNewPlanWhileAnAgentCannotBeHeard) {
  RunningJob(10, 0.5);
  Disconnect(AtS(6.8), b_);
  Sweep(AtS(7));
  EXPECT_THAT(OfKind(Take().events, EventKind::kCheckpointPlan), IsEmpty());
  EXPECT_THAT(control().plans().plans(), IsEmpty());
}

TEST_F(PlanningTest, OneOffCheckpointIsRefusedWhileAnAgentCannotBeHeard) {
  absl::Time t = RunningJob(10, 0.5);
  Disconnect(t, b_);
  absl::StatusOr<std::string> r = sup_->RequestCheckpoint(t + absl::Seconds(1), "job");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("node node-b cannot be heard"));
}

TEST_F(PlanningTest, NoPlanBeforeTheJobHasAStepTime) {
  Start(AtS(0));
  StartedAll(AtS(1));
  Sweep(AtS(2));
  // The helper's first step reports no duration (0): still no step time.
  StepAll(AtS(3), 1, 0);
  Sweep(AtS(4));
  SupervisorOutput out = Take();
  EXPECT_THAT(OfKind(out.events, EventKind::kCheckpointPlan), IsEmpty());
  EXPECT_THAT(Plans(out.commands), IsEmpty());
  StepAll(AtS(5), 2, 2);
  Sweep(AtS(6));
  EXPECT_EQ(OfKind(Take().events, EventKind::kCheckpointPlan).size(), 1u);
}

TEST_F(PlanningTest, HorizonIsAtLeastFiveSteps) {
  RunningJob(3, 4.0);  // 10s is 2.5 steps of 4s
  Sweep(AtS(12));
  std::vector<AgentCommand> commands = Plans(Take().commands);
  ASSERT_FALSE(commands.empty());
  EXPECT_EQ(commands[0].plan.effective_from_step, 3 + 5);
}

TEST_F(PlanningTest, HorizonCoversThePlanHorizonInSteps) {
  options_.publish.horizon = absl::Seconds(30);
  RunningJob(4, 2.0);  // 30s is 15 steps of 2s
  Sweep(AtS(9));
  std::vector<AgentCommand> commands = Plans(Take().commands);
  ASSERT_FALSE(commands.empty());
  EXPECT_EQ(commands[0].plan.effective_from_step, 4 + 15);
}

TEST_F(PlanningTest, NoCheckpointPlanOptionPublishesNothing) {
  options_.plan_checkpoints = false;
  absl::Time t = RunningJob(10, 0.5);
  for (int i = 0; i < 3; ++i) {
    Sweep(t + absl::Seconds(1));
    t = CrashAndRestart(t + absl::Seconds(2));
    StartedAll(t + absl::Seconds(1));
    t = Steps(t + absl::Seconds(2), 1, 5, 0.5);
  }
  Sweep(t + absl::Seconds(1));
  SupervisorOutput out = Take();
  EXPECT_THAT(OfKind(out.events, EventKind::kCheckpointPlan), IsEmpty());
  EXPECT_THAT(Plans(out.commands), IsEmpty());
  EXPECT_THAT(control().plans().plans(), IsEmpty());
}

// ---------------------------------------------------------------------------
// Hysteresis and replanning

TEST_F(PlanningTest, SweepWithNothingChangedPublishesNothingNew) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  Take();
  // More steps, more exposure (the MTBF creeps up), more sweeps.
  t = Steps(t + absl::Seconds(1), 11, 40, 0.5);
  for (int i = 0; i < 5; ++i) Sweep(t + absl::Seconds(i));
  SupervisorOutput out = Take();
  EXPECT_THAT(OfKind(out.events, EventKind::kCheckpointPlan), IsEmpty());
  EXPECT_THAT(Plans(out.commands), IsEmpty());
  EXPECT_EQ(control().plans().plans().size(), 1u);
}

TEST_F(PlanningTest, IntervalShrinksAsFailuresAccumulate) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  Take();
  std::vector<int64_t> published = {control().plans().plans().back().interval_steps};
  std::vector<double> conservative;
  for (int failure = 1; failure <= 6; ++failure) {
    t = CrashAndRestart(t + absl::Seconds(2));
    StartedAll(t + absl::Seconds(1));
    t = Steps(t + absl::Seconds(2), 1, 4, 0.5);
    const absl::Time sweep = t + absl::Seconds(1);
    const int64_t previous_from = control().plans().plans().back().effective_from_step;
    Sweep(sweep);
    const MtbfEstimate mtbf = sup_->JobMtbf(control(), sweep);
    EXPECT_EQ(mtbf.failures, failure);
    conservative.push_back(mtbf.conservative_seconds);
    SupervisorOutput out = Take();
    bool r_measured = false;
    const int64_t wanted = ExpectedIntervalSteps(
        60, mtbf.conservative_seconds, RestartCost(&r_measured), 0.5);
    const double move =
        std::abs(static_cast<double>(wanted - published.back())) / published.back();
    std::vector<AgentCommand> plans = Plans(out.commands);
    if (move > 0.2) {
      // A new plan, to both agents, with the planner's interval.
      ASSERT_EQ(plans.size(), 2u) << "failure " << failure;
      EXPECT_EQ(plans[0].plan.interval_steps, wanted);
      // The horizon past the current step, never before an earlier plan.
      EXPECT_EQ(plans[0].plan.effective_from_step, std::max<int64_t>(4 + 20, previous_from));
      published.push_back(wanted);
    } else {
      EXPECT_THAT(plans, IsEmpty()) << "failure " << failure << " moved " << move;
    }
  }
  // The conservative MTBF falls with every failure; the plans follow it down.
  for (size_t i = 1; i < conservative.size(); ++i) EXPECT_LT(conservative[i], conservative[i - 1]);
  EXPECT_GE(published.size(), 3u);
  for (size_t i = 1; i < published.size(); ++i) EXPECT_LT(published[i], published[i - 1]);
}

// ---------------------------------------------------------------------------
// Measured C and R

TEST_F(PlanningTest, CheckpointCostIsThePriorUntilMeasuredThenTheMedian) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  Take();
  bool measured = true;
  EXPECT_EQ(CheckpointCost(&measured), 60);
  EXPECT_FALSE(measured);

  // Three ranks checkpoint after step 10, blocking 12s, 30s and 18s.
  auto end = [&](uint32_t rank, double blocking) {
    Heartbeat hb = Hb(HeartbeatKind::kCheckpointEnd, rank, 10);
    hb.checkpoint_blocking_s = blocking;
    return hb;
  };
  Send(t + absl::Seconds(2), a_, {end(0, 12), end(1, 30)});
  Send(t + absl::Seconds(2), b_, {end(2, 18)});
  EXPECT_EQ(CheckpointCost(&measured), 18);
  EXPECT_TRUE(measured);

  // A much cheaper checkpoint than the prior: a new plan, from measured C.
  const absl::Time sweep = t + absl::Seconds(3);
  Sweep(sweep);
  SupervisorOutput out = Take();
  std::vector<Event> plans = OfKind(out.events, EventKind::kCheckpointPlan);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(Figure(plans[0], "checkpoint_seconds"), 18.0);
  EXPECT_EQ(Figure(plans[0], "checkpoint_measured"), 1.0);
  const int64_t wanted = ExpectedIntervalSteps(
      18, sup_->JobMtbf(control(), sweep).conservative_seconds, 300, 0.5);
  EXPECT_EQ(Figure(plans[0], "interval_steps"), static_cast<double>(wanted));
}

TEST_F(PlanningTest, RestartCostIsMeasuredFromFailureToFirstStepOfTheNextGeneration) {
  absl::Time t = RunningJob(10, 0.5);  // step 10 at 6.5s
  bool measured = true;
  EXPECT_EQ(RestartCost(&measured), 300);
  EXPECT_FALSE(measured);

  // Rank 0 dies at 9.5s (reported at 10s); generation 2 starts at 13s, its
  // ranks report at 14s and complete their first step at 30s.
  ASSERT_EQ(t, AtS(6.5));
  const absl::Time restarted = CrashAndRestart(AtS(10));
  ASSERT_EQ(restarted, AtS(13));
  StartedAll(AtS(14));
  StepAll(AtS(30), 1, 0);
  Sweep(AtS(30));
  std::vector<Event> recovered = OfKind(Take().events, EventKind::kRecovered);
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(Figure(recovered[0], "total_seconds"), 20.5);
  EXPECT_EQ(RestartCost(&measured), 20.5);
  EXPECT_TRUE(measured);
}

// ---------------------------------------------------------------------------
// MTBF exposure

TEST_F(PlanningTest, ExposureCountsOnlyTimeRunning) {
  Start(AtS(0));
  EXPECT_EQ(sup_->JobMtbf(control(), AtS(9)).exposure_seconds, 0);  // pending
  StartedAll(AtS(10));                                               // running from 10s
  Steps(AtS(11), 1, 4, 0.5);
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(30)).exposure_seconds, 20, kEps);

  // Crash acted on at 41s (stopping), restarting at 42s, running again at 43s.
  CrashAndRestart(AtS(40));
  const MtbfEstimate mtbf = sup_->JobMtbf(control(), AtS(53));
  EXPECT_NEAR(mtbf.exposure_seconds, 31 + 10, kEps);
  EXPECT_EQ(mtbf.failures, 1);
  // What the estimator says for that exposure and failure count.
  const MtbfEstimate direct = MtbfEstimator(options_.mtbf).Estimate(41, 1);
  EXPECT_NEAR(mtbf.conservative_seconds, direct.conservative_seconds, 1e-6);
}

TEST_F(PlanningTest, ExposureStopsWhileStoppingAndRestarting) {
  Start(AtS(0));
  StartedAll(AtS(10));
  Steps(AtS(11), 1, 4, 0.5);
  Send(AtS(40), a_, {}, {Died(0, 0.5, 1), Alive(1)});
  Sweep(AtS(41));
  ASSERT_EQ(state(), "stopping");
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(41)).exposure_seconds, 31, kEps);
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(500)).exposure_seconds, 31, kEps);
  SendExited(AtS(42), a_, 1);
  SendExited(AtS(42), b_, 0, 15);
  Sweep(AtS(42));
  ASSERT_EQ(state(), "restarting");
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(600)).exposure_seconds, 31, kEps);
}

TEST_F(PlanningTest, ExposureStopsWhileHeld) {
  options_.restart.limit = 0;  // the first failure holds the job
  Start(AtS(0));
  StartedAll(AtS(10));
  Steps(AtS(11), 1, 4, 0.5);
  Send(AtS(40), a_, {}, {Died(0, 0.5, 1), Alive(1)});
  Sweep(AtS(41));
  SendExited(AtS(42), a_, 1);
  SendExited(AtS(42), b_, 0, 15);
  Sweep(AtS(42));
  ASSERT_EQ(state(), "held");
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(3600)).exposure_seconds, 31, kEps);
  EXPECT_EQ(sup_->JobMtbf(control(), AtS(3600)).failures, 1);
}

TEST_F(PlanningTest, ClusterMtbfSumsTheJobs) {
  Start(AtS(0));
  StartedAll(AtS(10));  // "job" running from 10s
  // A second job on node-c, running from 20s, fails once.
  AgentHelloInfo hello = HelloOf("node-c");
  hello.job = "other";
  const SessionId c = Connect(AtS(0), hello);
  Heartbeat hb;
  hb.kind = HeartbeatKind::kStart;
  hb.job = "other";
  hb.world_size = 1;
  hb.pid = 7;
  hb.generation = 1;
  NodeReportInfo report;
  report.generation = 1;
  report.launcher.state = LauncherState::kRunning;
  report.heartbeats = {hb};
  RankProcessInfo alive;
  alive.pid = 7;
  alive.generation = 1;
  report.processes = {alive};
  ASSERT_TRUE(sup_->Report(AtS(20), c, report).ok());
  RankProcessInfo died = alive;
  died.alive = false;
  died.exit_known = true;
  died.exit_code = 1;
  report.heartbeats.clear();
  report.processes = {died};
  ASSERT_TRUE(sup_->Report(AtS(50), c, report).ok());
  Sweep(AtS(51));  // "other" stops at 51s
  const JobEntry* other = sup_->FindEntry("other");
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(JobStateName(other->lifecycle().state), "stopping");

  const MtbfEstimate cluster = sup_->ClusterMtbf(AtS(100));
  EXPECT_NEAR(sup_->JobMtbf(control(), AtS(100)).exposure_seconds, 90, kEps);
  EXPECT_NEAR(sup_->JobMtbf(*other, AtS(100)).exposure_seconds, 31, kEps);
  EXPECT_NEAR(cluster.exposure_seconds, 90 + 31, kEps);
  EXPECT_EQ(cluster.failures, 1);
  EXPECT_NEAR(cluster.conservative_seconds,
              MtbfEstimator(options_.mtbf).Estimate(121, 1).conservative_seconds, 1e-6);
}

// ---------------------------------------------------------------------------
// Delivery of the plans to the agents

TEST_F(PlanningTest, EveryAgentGetsEveryPlanOnceInOrder) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  SupervisorOutput first = Take();
  ASSERT_TRUE(sup_->RequestCheckpoint(t + absl::Seconds(2), "job").ok());
  Sweep(t + absl::Seconds(2));
  SupervisorOutput second = Take();
  ASSERT_TRUE(sup_->RequestCheckpoint(t + absl::Seconds(3), "job").ok());
  Sweep(t + absl::Seconds(3));
  Sweep(t + absl::Seconds(4));
  SupervisorOutput third = Take();

  ASSERT_EQ(control().plans().plans().size(), 3u);
  const uint64_t p1 = control().plans().plans()[0].plan_id;
  const uint64_t p2 = control().plans().plans()[1].plan_id;
  const uint64_t p3 = control().plans().plans()[2].plan_id;
  EXPECT_LT(p1, p2);
  EXPECT_LT(p2, p3);
  using Ids = std::vector<uint64_t>;
  EXPECT_EQ(PlanIdsByNode(first.commands),
            (std::map<std::string, Ids>{{"node-a", {p1}}, {"node-b", {p1}}}));
  EXPECT_EQ(PlanIdsByNode(second.commands),
            (std::map<std::string, Ids>{{"node-a", {p2}}, {"node-b", {p2}}}));
  EXPECT_EQ(PlanIdsByNode(third.commands),
            (std::map<std::string, Ids>{{"node-a", {p3}}, {"node-b", {p3}}}));
}

TEST_F(PlanningTest, ReconnectingAgentGetsAllPlansAgainInOrder) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  ASSERT_TRUE(sup_->RequestCheckpoint(t + absl::Seconds(2), "job").ok());
  Sweep(t + absl::Seconds(2));
  Take();
  ASSERT_EQ(control().plans().plans().size(), 2u);

  // node-a's agent reconnects (its stream broke; it still runs generation 1).
  Disconnect(t + absl::Seconds(3), a_);
  a_ = Connect(t + absl::Seconds(4), "node-a", gen_);
  SupervisorOutput out = Take();
  std::vector<AgentCommand> plans = Plans(out.commands);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].session, a_);
  EXPECT_EQ(plans[1].session, a_);
  EXPECT_EQ(plans[0].plan.plan_id, control().plans().plans()[0].plan_id);
  EXPECT_EQ(plans[1].plan.plan_id, control().plans().plans()[1].plan_id);
  EXPECT_EQ(plans[1].plan.one_off_steps, control().plans().plans()[1].one_off_steps);
  // ... once.
  Sweep(t + absl::Seconds(5));
  EXPECT_THAT(Plans(Take().commands), IsEmpty());
}

TEST_F(PlanningTest, AgentJoiningLaterGetsThePlansPublishedBefore) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  Take();
  const SessionId c = Connect(t + absl::Seconds(2), "node-c");
  std::vector<AgentCommand> plans = Plans(Take().commands);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].session, c);
  EXPECT_EQ(plans[0].plan.plan_id, control().plans().plans()[0].plan_id);
}

TEST_F(PlanningTest, PlanIdsKeepIncreasingAcrossARestoreAtALaterTime) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  ASSERT_TRUE(sup_->RequestCheckpoint(t + absl::Seconds(2), "job").ok());
  Take();
  uint64_t highest = 0;
  for (const CheckpointPlanSpec& p : control().plans().plans()) {
    highest = std::max(highest, p.plan_id);
  }
  ASSERT_EQ(control().plans().plans().size(), 2u);

  // The supervisor restarts 30s later: a new one, restored from its journal
  // (the job's latest row).
  PersistedState state;
  JobRow row;
  row.job = "job";
  row.generation = gen_;
  row.state = "running";
  row.world_size = kWorld;
  row.changed = AtS(1);
  state.jobs = {row};
  const absl::Time later = t + absl::Seconds(30);
  sup_ = std::make_unique<Supervisor>(options_);
  sup_->Restore(later, state);
  a_ = Connect(later, "node-a", gen_);
  b_ = Connect(later, "node-b", gen_);
  const absl::Time steps_end = Steps(later + absl::Seconds(1), 11, 14, 0.5);
  Sweep(steps_end + absl::Seconds(1));
  std::vector<AgentCommand> plans = Plans(Take().commands);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_GT(plans[0].plan.plan_id, highest);
  EXPECT_EQ(plans[0].plan.plan_id,
            static_cast<uint64_t>(absl::ToUnixMicros(steps_end + absl::Seconds(1))));
}

TEST_F(PlanningTest, PlanIdsIncreaseEvenWhenPublishedInTheSameMicrosecond) {
  absl::Time t = RunningJob(10, 0.5);
  const absl::Time now = t + absl::Seconds(1);
  Sweep(now);
  ASSERT_TRUE(sup_->RequestCheckpoint(now, "job").ok());
  ASSERT_TRUE(sup_->RequestCheckpoint(now, "job").ok());
  ASSERT_EQ(control().plans().plans().size(), 3u);
  EXPECT_EQ(control().plans().plans()[0].plan_id, static_cast<uint64_t>(absl::ToUnixMicros(now)));
  EXPECT_EQ(control().plans().plans()[1].plan_id, control().plans().plans()[0].plan_id + 1);
  EXPECT_EQ(control().plans().plans()[2].plan_id, control().plans().plans()[1].plan_id + 1);
}

// ---------------------------------------------------------------------------
// The operator's checkpoint

TEST_F(PlanningTest, RequestCheckpointForAnUnknownJobIsNotFound) {
  Start(AtS(0));
  EXPECT_EQ(sup_->RequestCheckpoint(AtS(1), "nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PlanningTest, RequestCheckpointForAJobNotRunningIsAFailedPrecondition) {
  Start(AtS(0));
  ASSERT_EQ(state(), "pending");
  EXPECT_EQ(sup_->RequestCheckpoint(AtS(1), "job").status().code(),
            absl::StatusCode::kFailedPrecondition);

  StartedAll(AtS(2));
  ASSERT_EQ(state(), "running");
  absl::StatusOr<std::string> no_step = sup_->RequestCheckpoint(AtS(3), "job");
  EXPECT_EQ(no_step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_step.status().message(), HasSubstr("no step"));

  Steps(AtS(4), 1, 3, 0.5);
  Send(AtS(10), a_, {}, {Died(0, 0.5, 1), Alive(1)});
  Sweep(AtS(11));
  ASSERT_EQ(state(), "stopping");
  EXPECT_EQ(sup_->RequestCheckpoint(AtS(12), "job").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(control().plans().plans(), IsEmpty());
}

TEST_F(PlanningTest, RequestCheckpointAddsAOneOffAtACommonFutureStep) {
  absl::Time t = RunningJob(10, 0.5);
  Sweep(t + absl::Seconds(1));
  Take();
  const CheckpointPlanSpec before = control().plans().plans().back();
  t = Steps(t + absl::Seconds(1), 11, 30, 0.5);  // max step 30

  absl::StatusOr<std::string> said = sup_->RequestCheckpoint(t, "job");
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_THAT(*said, HasSubstr("step 50"));
  ASSERT_EQ(control().plans().plans().size(), 2u);
  const CheckpointPlanSpec& after = control().plans().plans().back();
  EXPECT_GT(after.plan_id, before.plan_id);
  // The same periodic schedule, plus the one-off 20 steps (10s) ahead.
  EXPECT_EQ(after.anchor_step, before.anchor_step);
  EXPECT_EQ(after.interval_steps, before.interval_steps);
  EXPECT_EQ(after.effective_from_step, before.effective_from_step);
  EXPECT_THAT(after.one_off_steps, ElementsAre(30 + 20));
  EXPECT_EQ(NextCheckpointStep(control().plans().plans(), 31), 50);
  // The periodic steps are unchanged around it.
  for (int64_t s = 0; s < 10'000; ++s) {
    if (s == 50) continue;
    ASSERT_EQ(ShouldCheckpoint(control().plans().plans(), s), ShouldCheckpoint({before}, s)) << s;
  }

  SupervisorOutput out = Take();
  std::vector<Event> events = OfKind(out.events, EventKind::kCheckpointPlan);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(Figure(events[0], "one_off_step"), 50.0);
  EXPECT_EQ(Figure(events[0], "ahead_seconds"), 10.0);  // 20 steps of 0.5s
  // The agents get it with the next sweep.
  Sweep(t + absl::Seconds(1));
  std::vector<AgentCommand> plans = Plans(Take().commands);
  ASSERT_EQ(plans.size(), 2u);
  for (const AgentCommand& c : plans) EXPECT_THAT(c.plan.one_off_steps, ElementsAre(50));
}

TEST_F(PlanningTest, RequestCheckpointWithoutAPlanYetIsAOneOffOnly) {
  options_.plan_checkpoints = false;
  absl::Time t = RunningJob(10, 0.5);
  ASSERT_TRUE(sup_->RequestCheckpoint(t, "job").ok());
  ASSERT_EQ(control().plans().plans().size(), 1u);
  EXPECT_EQ(control().plans().plans()[0].interval_steps, 0);
  EXPECT_EQ(NextCheckpointStep(control().plans().plans(), 11), 30);
  EXPECT_EQ(NextCheckpointStep(control().plans().plans(), 31), -1);
}

// ---------------------------------------------------------------------------
// The goodput ledger through Report

TEST_F(PlanningTest, LedgerSplitsAStretchByTheReportedDataWait) {
  Start(AtS(0));
  StartedAll(AtS(1));
  StepAll(AtS(10), 1, 0);       // the first move starts the ledger
  StepAll(AtS(12), 2, 2, 0.5);  // 2s, of which 0.5s waiting on input
  EXPECT_NEAR(Seconds(Bucket::kStarved), 0.5, kEps);
  EXPECT_NEAR(Seconds(Bucket::kUseful), 1.5, kEps);
  EXPECT_EQ(Seconds(Bucket::kLost), 0);
  EXPECT_NEAR(ledger().wall_seconds(), 2, kEps);
  EXPECT_NEAR(ledger().goodput(), 0.75, kEps);
  EXPECT_EQ(control().ledger().first_step_time(), AtS(10));
  EXPECT_EQ(control().ledger().last_step_time(), AtS(12));
}

TEST_F(PlanningTest, LedgerCountsBlockingCheckpointTime) {
  Start(AtS(0));
  StartedAll(AtS(1));
  StepAll(AtS(10), 1, 0);
  StepAll(AtS(11), 2, 1);
  // Every rank checkpoints after step 2, blocking 3s; step 3 takes 4s.
  auto end = [&](uint32_t rank) {
    Heartbeat hb = Hb(HeartbeatKind::kCheckpointEnd, rank, 2);
    hb.checkpoint_blocking_s = 3;
    return hb;
  };
  Send(AtS(14), a_, {end(0), end(1)});
  Send(AtS(14), b_, {end(2), end(3)});
  StepAll(AtS(15), 3, 4);
  EXPECT_NEAR(Seconds(Bucket::kCheckpointBlocked), 3, kEps);
  EXPECT_NEAR(Seconds(Bucket::kUseful), 1 + 1, kEps);
  EXPECT_NEAR(ledger().wall_seconds(), 5, kEps);
}

TEST_F(PlanningTest, LedgerCountsTheRestartAndReDoneStepsAsLost) {
  Start(AtS(0));
  StartedAll(AtS(1));
  Steps(AtS(10), 1, 5, 1);  // steps 1..5 at 10..14s: 4s useful
  EXPECT_NEAR(Seconds(Bucket::kUseful), 4, kEps);
  // Rank 0 dies at 19.5s; generation 2 starts at 23s and resumes from step 2
  // (its last checkpoint): step 3 at 30s, re-done steps 4, 5 at 31, 32s, new
  // steps 6, 7 at 33, 34s.
  const absl::Time restarted = CrashAndRestart(AtS(20));
  ASSERT_EQ(restarted, AtS(23));
  StartedAll(AtS(24));
  Steps(AtS(30), 3, 7, 1);
  EXPECT_NEAR(Seconds(Bucket::kLost), (30 - 14) + 2, kEps);
  EXPECT_NEAR(Seconds(Bucket::kUseful), 4 + 2, kEps);
  EXPECT_NEAR(ledger().wall_seconds(), 34 - 10, kEps);
  // By generation: 4s useful in 1; the failure and the re-done steps in 2.
  const auto& by = control().ledger().by_generation();
  ASSERT_EQ(by.count(1), 1u);
  ASSERT_EQ(by.count(2), 1u);
  EXPECT_NEAR(by.at(1).wall_seconds(), 4, kEps);
  EXPECT_NEAR(by.at(2).seconds[static_cast<int>(Bucket::kLost)], 18, kEps);
  EXPECT_NEAR(by.at(2).seconds[static_cast<int>(Bucket::kUseful)], 2, kEps);
}

// ---------------------------------------------------------------------------
// Plans after a restart that went back in steps

// The agents keep every plan across generations, and a new generation resumes
// from its checkpoint's (earlier) step. A new plan never starts before an
// earlier one (the greatest effective_from <= s decides, so an earlier start
// would leave the older plan in force from its own start on): the newest plan
// decides every step from its effective_from on.
TEST_F(PlanningTest, NewestPlanDecidesEveryStepFromItsEffectiveFromAfterARestartThatWentBack) {
  options_.publish.replan_threshold = 0.05;  // one failure moves the interval by ~15%
  absl::Time t = RunningJob(100, 0.5);  // step 100
  Sweep(t + absl::Seconds(1));     // plan 1: from step 120
  Take();
  ASSERT_EQ(control().plans().plans().size(), 1u);
  ASSERT_EQ(control().plans().plans()[0].effective_from_step, 120);

  // Crash at step 100; generation 2 resumes from its checkpoint at step 50.
  t = CrashAndRestart(t + absl::Seconds(2));
  StartedAll(t + absl::Seconds(1));
  t = Steps(t + absl::Seconds(2), 51, 52, 0.5);
  Sweep(t + absl::Seconds(1));  // plan 2: smaller interval, not before step 120
  Take();
  ASSERT_EQ(control().plans().plans().size(), 2u);
  const CheckpointPlanSpec newest = control().plans().plans().back();
  EXPECT_EQ(newest.effective_from_step, 120);
  ASSERT_LT(newest.interval_steps, control().plans().plans()[0].interval_steps);

  // Every step from there on follows the newest plan.
  EXPECT_EQ(NextCheckpointStep(control().plans().plans(), newest.effective_from_step + 1),
            newest.effective_from_step + newest.interval_steps);
  for (int64_t s = newest.effective_from_step; s < newest.effective_from_step + 5000; ++s) {
    EXPECT_EQ(ShouldCheckpoint(control().plans().plans(), s),
              (s - newest.anchor_step) % newest.interval_steps == 0)
        << "step " << s;
  }
}

}  // namespace
}  // namespace trainsup
