// RestartCoordinator on its own: the lifecycle table, a coordinated restart
// (stop everywhere, the governor's backoff, the next generation on the nodes
// that can run it), the hold at the restart cap, the finish, the operator's
// resume. Driven by a fake clock; read from the events, the journal and the
// nodes' membership.
#include "daemon/core/restart_coordinator.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::trainsup::testing::CorePartsOptions;
using ::trainsup::testing::CorePartsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::MakeHello;
using ::trainsup::testing::OfKind;

class RestartCoordinatorTest : public CorePartsTest {
 protected:
  explicit RestartCoordinatorTest(SupervisorOptions options = CorePartsOptions())
      : CorePartsTest(std::move(options)) {}

  // `name`'s agent reports its command ended (with `exit_code`), now: its
  // node's record and the job's record of its generation's nodes say so, as
  // the Supervisor's Report has them say it.
  void Exited(const std::string& name, int32_t exit_code = 143) {
    NodeRecord& n = Node(name);
    n.launcher.state = LauncherState::kExited;
    n.launcher.exit_code = exit_code;
    n.last_report = now();
    job().NoteLauncher(name, n.generation, n.launcher);
  }
  // A failure on node-b a second ago stops the job; both agents stop and
  // the coordinator moves it to restarting.
  void FailAndStop() {
    restarts_.BeginRestart(now(), job(), now() - absl::Seconds(1), "crash on node-b");
    clock_.Advance(absl::Seconds(1));
    Exited("node-a");
    Exited("node-b");
    restarts_.SweepStopping(now(), job());
  }
};

TEST_F(RestartCoordinatorTest, TransitionOutsideTheTableIsRefusedAndCounted) {
  StartJob();
  const absl::Status refused = restarts_.Transition(now(), job(), JobState::kRestarting, "test");

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("pending -> restarting"));
  EXPECT_EQ(job().lifecycle().state, JobState::kPending);
  EXPECT_EQ(restarts_.refused_transitions(), 1u);
  EXPECT_TRUE(decisions_.Take().events.empty());
}

TEST_F(RestartCoordinatorTest, TransitionIsAnEventAndAJournaledRecord) {
  StartJob();
  ASSERT_TRUE(restarts_.Transition(now(), job(), JobState::kRunning, "ranks report").ok());

  const SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].kind, EventKind::kStateChange);
  ASSERT_EQ(out.journal.jobs.size(), 1u);
  EXPECT_EQ(out.journal.jobs[0].state, "running");
  EXPECT_EQ(out.journal.jobs[0].reason, "ranks report");
  EXPECT_EQ(out.journal.jobs[0].generation, 1u);
  EXPECT_EQ(job().lifecycle().since, now());
}

TEST_F(RestartCoordinatorTest, FailureStopsEverywhereThenRestartsAfterTheBackoff) {
  RunJob();
  decisions_.Take();
  restarts_.BeginRestart(now(), job(), now() - absl::Seconds(1), "crash on node-b");
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);

  // node-a stopped, node-b still runs: wait for it.
  clock_.Advance(absl::Seconds(1));
  Exited("node-a");
  Node("node-b").last_report = now();
  restarts_.SweepStopping(now(), job());
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);

  Exited("node-b");
  restarts_.SweepStopping(now(), job());
  EXPECT_EQ(job().lifecycle().state, JobState::kRestarting);
  EXPECT_EQ(job().lifecycle().restart_at, now() + absl::Seconds(5));  // the first backoff

  clock_.Advance(absl::Seconds(4));
  restarts_.SweepRestarting(now(), job());
  EXPECT_EQ(job().lifecycle().state, JobState::kRestarting);
  EXPECT_EQ(job().job().generation(), 1u);

  clock_.Advance(absl::Seconds(1));
  Exited("node-a");  // heard lately: members of the next generation
  Exited("node-b");
  restarts_.SweepRestarting(now(), job());

  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
  EXPECT_EQ(job().job().generation(), 2u);
  EXPECT_EQ(job().lifecycle().restarts, 1u);
  EXPECT_EQ(Node("node-a").member_generation, 2u);
  EXPECT_EQ(Node("node-b").member_generation, 2u);
  const SupervisorOutput out = decisions_.Take();
  const std::vector<Event> restarted = OfKind(out.events, EventKind::kRestart);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_EQ(restarted[0].generation, 2u);
  EXPECT_THAT(Figure(restarted[0], "nodes"), Optional(2.0));
  EXPECT_THAT(Figure(restarted[0], "nodes_left_out"), Optional(0.0));
  ASSERT_EQ(out.journal.restarts.size(), 1u);
  EXPECT_EQ(out.journal.restarts[0].from_generation, 1u);
  EXPECT_EQ(out.journal.restarts[0].to_generation, 2u);
  EXPECT_EQ(out.journal.restarts[0].reason, "crash on node-b");
}

TEST_F(RestartCoordinatorTest, StopTimeoutGoesOnWithoutTheAgentThatDidNotStop) {
  RunJob();
  restarts_.BeginRestart(now(), job(), now(), "hang");
  for (int s = 1; s < 30; ++s) {
    clock_.Advance(absl::Seconds(1));
    Exited("node-a");
    Node("node-b").last_report = now();  // heard, never stopping
    restarts_.SweepStopping(now(), job());
    ASSERT_EQ(job().lifecycle().state, JobState::kStopping) << s << "s";
  }
  clock_.Advance(absl::Seconds(1));
  Node("node-b").last_report = now();
  restarts_.SweepStopping(now(), job());

  EXPECT_EQ(job().lifecycle().state, JobState::kRestarting);
  EXPECT_THAT(job().lifecycle().reason, HasSubstr("1 node did not stop within 30.0s"));
}

TEST_F(RestartCoordinatorTest, QuarantinedNodeIsLeftOutOfTheNextGeneration) {
  RunJob();
  quarantine_.Quarantine("node-b", "bad disk");
  FailAndStop();
  clock_.Advance(absl::Seconds(5));
  Exited("node-a");
  restarts_.SweepRestarting(now(), job());

  EXPECT_EQ(job().job().generation(), 2u);
  EXPECT_EQ(Node("node-a").member_generation, 2u);
  EXPECT_EQ(Node("node-b").member_generation, 1u);  // never started on it
  const std::vector<Event> restarted = OfKind(decisions_.Take().events, EventKind::kRestart);
  ASSERT_EQ(restarted.size(), 1u);
  EXPECT_THAT(Figure(restarted[0], "nodes"), Optional(1.0));
  EXPECT_THAT(Figure(restarted[0], "nodes_left_out"), Optional(1.0));
}

TEST_F(RestartCoordinatorTest, NoNodeToRunOnFailsTheJob) {
  RunJob();
  quarantine_.Quarantine("node-a", "bad disk");
  quarantine_.Quarantine("node-b", "bad nic");
  FailAndStop();
  clock_.Advance(absl::Seconds(5));
  restarts_.SweepRestarting(now(), job());

  EXPECT_EQ(job().lifecycle().state, JobState::kFailed);
  EXPECT_EQ(job().job().generation(), 1u);
}

// At most one restart an hour.
class RestartCapTest : public RestartCoordinatorTest {
 protected:
  static SupervisorOptions Options() {
    SupervisorOptions o = CorePartsOptions();
    o.restart.limit = 1;
    return o;
  }
  RestartCapTest() : RestartCoordinatorTest(Options()) {}
};

TEST_F(RestartCapTest, FailurePastTheCapHoldsTheJobAndResumeForgivesIt) {
  RunJob();
  FailAndStop();
  ASSERT_EQ(job().lifecycle().state, JobState::kRestarting);
  clock_.Advance(absl::Seconds(5));
  Exited("node-a");
  Exited("node-b");
  restarts_.SweepRestarting(now(), job());
  ASSERT_EQ(job().lifecycle().state, JobState::kRunning);
  decisions_.Take();

  FailAndStop();  // the second failure within the hour

  EXPECT_EQ(job().lifecycle().state, JobState::kHeld);
  EXPECT_EQ(OfKind(decisions_.Take().events, EventKind::kHold).size(), 1u);

  absl::StatusOr<std::string> resumed = restarts_.Resume(now(), job());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(*resumed, "job job resumed: generation 3 starts now");
  EXPECT_EQ(job().lifecycle().state, JobState::kRestarting);
  EXPECT_EQ(job().lifecycle().restart_at, now());
  EXPECT_EQ(OfKind(decisions_.Take().events, EventKind::kResume).size(), 1u);
  // Generation 3 starts at the next sweep.
  clock_.Advance(absl::Seconds(1));
  Exited("node-a");
  Exited("node-b");
  restarts_.SweepRestarting(now(), job());
  ASSERT_EQ(job().lifecycle().state, JobState::kRunning);
  EXPECT_THAT(*restarts_.Resume(now(), job()), HasSubstr("is not held"));
}

TEST_F(RestartCapTest, ResumeIsRefusedWhileNoAgentWaitsToRunTheJob) {
  RunJob();
  restarts_.BeginRestart(now(), job(), now(), "crash", RestartLimitHold(1, absl::Hours(1), 1,
                                                                        "crash"));
  clock_.Advance(absl::Seconds(1));
  Exited("node-a");
  Exited("node-b");
  restarts_.SweepStopping(now(), job());
  ASSERT_EQ(job().lifecycle().state, JobState::kHeld);
  decisions_.Take();
  // Both agents gave up waiting (--hold-timeout) and left.
  agents_.Disconnect(Node("node-a").session);
  agents_.Disconnect(Node("node-b").session);
  EXPECT_EQ(agents_.AgentsWaiting("job"), 0u);

  absl::StatusOr<std::string> refused = restarts_.Resume(now(), job());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("no agent waits to run it"));
  EXPECT_EQ(job().lifecycle().state, JobState::kHeld);
  EXPECT_TRUE(decisions_.Take().events.empty());

  // One agent is back: the job can restart on it.
  agents_.Connect(now(), ::trainsup::testing::MakeHello("node-a"));
  EXPECT_EQ(agents_.AgentsWaiting("job"), 1u);
  ASSERT_TRUE(restarts_.Resume(now(), job()).ok());
  EXPECT_EQ(job().lifecycle().state, JobState::kRestarting);
}

TEST_F(RestartCoordinatorTest, AFinishedJobHasNothingToResume) {
  RunJob();
  Exited("node-a", 0);
  Exited("node-b", 0);
  restarts_.CheckFinished(now(), job());
  ASSERT_EQ(job().lifecycle().state, JobState::kFinished);

  absl::StatusOr<std::string> refused = restarts_.Resume(now(), job());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("has finished"));
  EXPECT_EQ(job().lifecycle().state, JobState::kFinished);
}

TEST_F(RestartCoordinatorTest, JobFinishesWhenEveryNodeOfItsGenerationExitedZero) {
  RunJob();
  Exited("node-a", 0);
  restarts_.CheckFinished(now(), job());
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);  // node-b still runs

  Exited("node-b", 0);
  restarts_.CheckFinished(now(), job());

  EXPECT_EQ(job().lifecycle().state, JobState::kFinished);
  EXPECT_EQ(job().lifecycle().reason, "the command exited 0 on all 2 nodes");
  // An ended job's picture is journaled as it ends.
  EXPECT_EQ(decisions_.Take().journal.ended_jobs.size(), 1u);
}

// The job's end comes from what its generation's nodes said for it: a node
// whose name already serves the next job still counts with its exit 0.
TEST_F(RestartCoordinatorTest, JobFinishesFromItsOwnNodesWhenTheirNamesServeTheNextJob) {
  RunJob();
  Exited("node-a", 0);
  Exited("node-b", 0);
  agents_.Disconnect(Node("node-a").session);
  agents_.Disconnect(Node("node-b").session);
  agents_.Connect(now(), MakeHello("node-a", "next", 7));
  agents_.Connect(now(), MakeHello("node-b", "next", 8));
  ASSERT_TRUE(agents_.NodesOf("job").empty());

  restarts_.CheckFinished(now(), job());

  EXPECT_EQ(job().lifecycle().state, JobState::kFinished);
  EXPECT_EQ(job().lifecycle().reason, "the command exited 0 on all 2 nodes");
}

}  // namespace
}  // namespace trainsup
