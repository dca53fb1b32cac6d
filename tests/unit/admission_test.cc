// Admission on its own: which hellos are served, what each does to its job
// (new, adopted, run again), whether the agent launches or waits, which
// generation its node is a member of, and when a pending job runs. Driven by
// a fake clock, with the registry, quarantine, jobs and lifecycle it works on.
#include "daemon/core/admission.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "daemon/core/decisions.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::trainsup::testing::MakeHeartbeat;
using ::trainsup::testing::MakeHello;

// A hello of an agent whose command runs `generation` already (it
// reconnected, or outlived a supervisor that lost its state).
AgentHelloInfo RunningHello(const std::string& node, uint64_t generation) {
  AgentHelloInfo hello = MakeHello(node, "job", /*incarnation=*/1, generation);
  hello.launcher.state = LauncherState::kRunning;
  return hello;
}

class AdmissionTest : public ::testing::Test {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o;
    o.limits.max_jobs = 2;
    o.limits.max_nodes = 3;
    return o;
  }

  // As the supervisor says hello: check, connect, admit.
  absl::StatusOr<Admission::Admitted> Hello(const AgentHelloInfo& hello) {
    if (absl::Status s = admission_.Check(clock_.Now(), hello); !s.ok()) return s;
    const AgentRegistry::Connection connection = agents_.Connect(clock_.Now(), hello);
    return admission_.Admit(clock_.Now(), hello, connection.node);
  }

  // Rank 0 of the job's current generation reports (from node 0).
  void RankReports(JobEntry& job) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStart, 0, 0);
    hb.generation = job.job().generation();
    ASSERT_EQ(job.job().Apply(clock_.Now(), 0, hb), std::nullopt);
  }

  const NodeRecord& Node(const std::string& name) const { return agents_.node(agents_.Find(name)); }
  JobEntry& Job() { return *jobs_.Find("job"); }
  // Moves the job through the lifecycle table, as the coordinator would.
  void MoveTo(JobState state) {
    ASSERT_TRUE(restarts_.Transition(clock_.Now(), Job(), state, "test").ok());
  }

  FakeClock clock_;
  const SupervisorOptions options_ = Options();
  Decisions decisions_{64};
  AgentRegistry agents_;
  QuarantinePolicy quarantine_{options_.quarantine};
  JobTable jobs_{options_};
  RestartCoordinator restarts_{options_, agents_, quarantine_, decisions_};
  Admission admission_{options_, agents_, quarantine_, jobs_, restarts_};
};

// ---------------------------------------------------------------------------
// What a hello does to its job

TEST_F(AdmissionTest, NewJobIsPendingAtGenerationOneAndJournaled) {
  absl::StatusOr<Admission::Admitted> admitted = Hello(MakeHello("node-a"));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->job, &Job());
  EXPECT_TRUE(admitted->launch);
  EXPECT_EQ(Job().job().generation(), 1u);
  EXPECT_EQ(Job().lifecycle().state, JobState::kPending);
  EXPECT_FALSE(Job().lifecycle().generation_adopted);
  EXPECT_EQ(Job().last_heard(), clock_.Now());
  // The welcome is its start: no separate start, and the node is a member.
  EXPECT_EQ(Node("node-a").told.start_generation, 1u);
  EXPECT_EQ(Node("node-a").member_generation, 1u);
  ASSERT_EQ(decisions_.journal().jobs.size(), 1u);
  EXPECT_EQ(decisions_.journal().jobs[0].job, "job");
  EXPECT_EQ(decisions_.journal().jobs[0].generation, 1u);
  EXPECT_EQ(decisions_.journal().jobs[0].state, "pending");
}

TEST_F(AdmissionTest, GenerationOfAnAgentThisSupervisorDoesNotKnowIsAdopted) {
  // This supervisor lost its state while the job ran generation 3.
  absl::StatusOr<Admission::Admitted> admitted = Hello(RunningHello("node-a", 3));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->launch);  // it runs the generation that runs: on it goes
  EXPECT_EQ(Job().job().generation(), 3u);
  EXPECT_TRUE(Job().lifecycle().generation_adopted);
  EXPECT_EQ(Node("node-a").member_generation, 3u);
  EXPECT_EQ(Node("node-a").told.start_generation, 0u);  // it was not started here
  // Another agent of the job may still move it on: the job's generations
  // are the agents' word until this supervisor starts one itself.
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Hello(RunningHello("node-b", 4)).ok());
  EXPECT_EQ(Job().job().generation(), 4u);
}

TEST_F(AdmissionTest, GenerationThisSupervisorNeverStartedIsRefused) {
  ASSERT_TRUE(Hello(MakeHello("node-a")).ok());  // started here: generation 1

  const absl::Status refused = admission_.Check(clock_.Now(), RunningHello("node-b", 5));

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("has no generation 5"));
  EXPECT_EQ(Job().job().generation(), 1u);
}

TEST_F(AdmissionTest, FinishedJobRunAgainByNewAgentsHasANewGenerationAndLedger) {
  ASSERT_TRUE(Hello(MakeHello("node-a")).ok());
  MoveTo(JobState::kRunning);
  Job().mutable_ledger().Advance(clock_.Now(), 1, {{1, 1.0, 0.0, 0.0}});
  Job().mutable_ledger().Advance(clock_.Now() + absl::Seconds(1), 1, {{2, 1.0, 0.0, 0.0}});
  ASSERT_GT(Job().ledger().totals().wall_seconds(), 0);
  MoveTo(JobState::kFinished);
  clock_.Advance(absl::Hours(1));

  absl::StatusOr<Admission::Admitted> admitted = Hello(MakeHello("node-b"));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->launch);
  EXPECT_EQ(Job().job().generation(), 2u);
  EXPECT_EQ(Job().lifecycle().state, JobState::kPending);
  EXPECT_EQ(Job().lifecycle().reason, "run again by new agents");
  EXPECT_EQ(Job().ledger().totals().wall_seconds(), 0);  // the idle hour is nobody's loss
  EXPECT_EQ(Node("node-b").member_generation, 2u);
}

TEST_F(AdmissionTest, FinishedJobIsNotRunAgainByAnAgentThatRanIt) {
  ASSERT_TRUE(Hello(RunningHello("node-a", 1)).ok());
  MoveTo(JobState::kRunning);
  MoveTo(JobState::kFinished);

  absl::StatusOr<Admission::Admitted> admitted = Hello(RunningHello("node-a", 1));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_FALSE(admitted->launch);
  EXPECT_EQ(Job().job().generation(), 1u);
  EXPECT_EQ(Job().lifecycle().state, JobState::kFinished);
}

TEST_F(AdmissionTest, HelloAdoptsThePlansItsRanksHold) {
  AgentHelloInfo hello = RunningHello("node-a", 2);
  CheckpointPlanSpec plan;
  plan.plan_id = 4;
  plan.anchor_step = 0;
  plan.interval_steps = 100;
  plan.effective_from_step = 200;
  hello.plans = {plan};

  ASSERT_TRUE(Hello(hello).ok());

  ASSERT_EQ(Job().plans().plans().size(), 1u);
  EXPECT_EQ(Job().plans().plans()[0].plan_id, 4u);
  EXPECT_EQ(Node("node-a").plans_held_through, 4u);
}

// ---------------------------------------------------------------------------
// Launch or wait

TEST_F(AdmissionTest, QuarantinedNodesAgentDoesNotLaunch) {
  quarantine_.Quarantine("node-a", "bad memory");

  absl::StatusOr<Admission::Admitted> admitted = Hello(MakeHello("node-a"));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_FALSE(admitted->launch);
  EXPECT_EQ(Node("node-a").member_generation, 0u);
  EXPECT_EQ(Node("node-a").told.start_generation, 0u);
}

TEST_F(AdmissionTest, AgentCutFromTheRunningGenerationWaitsForTheNext) {
  ASSERT_TRUE(Hello(RunningHello("node-a", 2)).ok());  // the job runs generation 2

  // node-b still runs generation 1: it was left out of generation 2.
  absl::StatusOr<Admission::Admitted> admitted = Hello(RunningHello("node-b", 1));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_FALSE(admitted->launch);
  EXPECT_EQ(Node("node-b").member_generation, 0u);
  EXPECT_EQ(Job().job().generation(), 2u);
}

TEST_F(AdmissionTest, ReconnectingAgentOfTheRunningGenerationStaysAMember) {
  ASSERT_TRUE(Hello(MakeHello("node-a")).ok());
  clock_.Advance(absl::Seconds(5));

  absl::StatusOr<Admission::Admitted> admitted = Hello(RunningHello("node-a", 1));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->launch);
  EXPECT_EQ(Node("node-a").member_generation, 1u);
}

TEST_F(AdmissionTest, FreshAgentOfAHeldJobWaits) {
  ASSERT_TRUE(Hello(MakeHello("node-a")).ok());
  MoveTo(JobState::kStopping);
  MoveTo(JobState::kHeld);

  absl::StatusOr<Admission::Admitted> admitted = Hello(MakeHello("node-b"));

  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_FALSE(admitted->launch);
  EXPECT_EQ(Job().lifecycle().state, JobState::kHeld);
}

// ---------------------------------------------------------------------------
// Hellos refused

TEST_F(AdmissionTest, BadNamesAreRefused) {
  EXPECT_EQ(admission_.Check(clock_.Now(), MakeHello("bad node")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(admission_.Check(clock_.Now(), MakeHello("node-a", "-job")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs_.size(), 0u);
}

TEST_F(AdmissionTest, SecondAgentOnANodeIsRefusedWhileTheFirstIsHeard) {
  ASSERT_TRUE(Hello(MakeHello("node-a", "job", /*incarnation=*/1)).ok());
  const AgentHelloInfo other = MakeHello("node-a", "job", /*incarnation=*/2);

  const absl::Status refused = admission_.Check(clock_.Now(), other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.message(), HasSubstr("served by another agent"));

  // The same agent reconnecting is welcome at once; another one only once
  // the first has gone silent.
  EXPECT_TRUE(admission_.Check(clock_.Now(), MakeHello("node-a", "job", 1)).ok());
  clock_.Advance(absl::Minutes(1));
  EXPECT_TRUE(admission_.Check(clock_.Now(), other).ok());
}

TEST_F(AdmissionTest, NewJobsAndNodesPastTheLimitsAreRefusedAndCounted) {
  ASSERT_TRUE(Hello(MakeHello("n1", "a")).ok());
  ASSERT_TRUE(Hello(MakeHello("n2", "b")).ok());

  const absl::Status job_refused = admission_.Check(clock_.Now(), MakeHello("n3", "c"));
  EXPECT_EQ(job_refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(job_refused.message(), HasSubstr("--max-jobs=2"));
  EXPECT_EQ(admission_.jobs_refused(), 1u);

  ASSERT_TRUE(Hello(MakeHello("n3", "a")).ok());  // a known job: welcome
  const absl::Status node_refused = admission_.Check(clock_.Now(), MakeHello("n4", "a"));
  EXPECT_EQ(node_refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(node_refused.message(), HasSubstr("--max-nodes=3"));
  EXPECT_EQ(admission_.nodes_refused(), 1u);
  EXPECT_EQ(admission_.jobs_refused(), 1u);
}

// ---------------------------------------------------------------------------
// Pending -> running

TEST_F(AdmissionTest, PendingJobRunsOnceItsGenerationsRanksReport) {
  ASSERT_TRUE(Hello(MakeHello("node-a")).ok());
  EXPECT_FALSE(admission_.NoticeReport(clock_.Now(), Job()));  // no rank yet
  EXPECT_EQ(Job().lifecycle().state, JobState::kPending);

  clock_.Advance(absl::Seconds(3));
  RankReports(Job());
  EXPECT_TRUE(admission_.NoticeReport(clock_.Now(), Job()));

  EXPECT_EQ(Job().lifecycle().state, JobState::kRunning);
  EXPECT_EQ(Job().lifecycle().since, clock_.Now());
  EXPECT_EQ(Job().lifecycle().reason, "generation 1 ranks report");
  EXPECT_FALSE(admission_.NoticeReport(clock_.Now(), Job()));  // once
}

}  // namespace
}  // namespace trainsup
