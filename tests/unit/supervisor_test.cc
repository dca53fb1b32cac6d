#include "daemon/core/supervisor.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/validation.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/test_time.h"
#include "tests/unit/reject_reason_printer.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AliveProcess;
using ::trainsup::testing::MakeHeartbeat;
using ::trainsup::testing::MakeHello;

using ::trainsup::testing::AtMs;

Heartbeat Step(uint32_t rank, int64_t step, const std::string& job = "job",
               uint32_t world_size = 4) {
  Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, rank, step, world_size);
  hb.job = job;
  hb.step_duration_s = 0.5;
  return hb;
}

class SupervisorTest : public ::testing::Test {
 protected:
  // Says hello for `node` and returns the session; fails the test on error.
  SessionId Connect(const std::string& node, const std::string& job = "job",
                    uint64_t incarnation = 1) {
    absl::StatusOr<Supervisor::HelloResult> result =
        supervisor_.Hello(AtMs(0), MakeHello(node, job, incarnation));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->session : 0;
  }

  NodeIndex IndexOf(const std::string& name) const {
    for (NodeIndex i = 0; i < supervisor_.nodes().size(); ++i) {
      if (supervisor_.node(i).name == name) return i;
    }
    ADD_FAILURE() << "no node " << name;
    return kNoNode;
  }

  Supervisor supervisor_{SupervisorOptions{}};
};

TEST_F(SupervisorTest, HelloRejectsInvalidNodeName) {
  for (const std::string& name : {std::string(), std::string("node 1"), std::string("a/b"),
                                  std::string(kMaxNameLength + 1, 'n')}) {
    absl::StatusOr<Supervisor::HelloResult> result = supervisor_.Hello(AtMs(0), MakeHello(name));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << "'" << name << "'";
  }
  EXPECT_TRUE(supervisor_.nodes().empty());
  EXPECT_EQ(supervisor_.agents_connected(), 0u);
}

TEST_F(SupervisorTest, HelloRejectsInvalidJobId) {
  for (const std::string& job : {std::string(), std::string("job!"), std::string("a b")}) {
    absl::StatusOr<Supervisor::HelloResult> result =
        supervisor_.Hello(AtMs(0), MakeHello("node-1", job));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << "'" << job << "'";
  }
  EXPECT_TRUE(supervisor_.nodes().empty());
  EXPECT_TRUE(supervisor_.Jobs().empty());
}

TEST_F(SupervisorTest, HelloOpensASessionAndReturnsTheJobsGeneration) {
  absl::StatusOr<Supervisor::HelloResult> result =
      supervisor_.Hello(AtMs(0), MakeHello("node-1", "job", 1, /*generation=*/3));
  ASSERT_TRUE(result.ok()) << result.status();

  EXPECT_NE(result->session, 0u);
  EXPECT_EQ(result->superseded, 0u);
  EXPECT_EQ(result->generation, 3u);
  EXPECT_EQ(supervisor_.agents_connected(), 1u);
  ASSERT_EQ(supervisor_.nodes().size(), 1u);
  const NodeRecord& node = supervisor_.node(0);
  EXPECT_EQ(node.name, "node-1");
  EXPECT_EQ(node.job, "job");
  EXPECT_TRUE(node.connected);
  EXPECT_EQ(node.session, result->session);
  ASSERT_NE(supervisor_.FindJob("job"), nullptr);
  EXPECT_EQ(supervisor_.FindJob("job")->generation(), 3u);
}

TEST_F(SupervisorTest, SecondHelloSupersedesTheFirstSession) {
  SessionId first = Connect("node-1");

  absl::StatusOr<Supervisor::HelloResult> second = supervisor_.Hello(AtMs(10), MakeHello("node-1"));
  ASSERT_TRUE(second.ok()) << second.status();

  EXPECT_EQ(second->superseded, first);
  EXPECT_NE(second->session, first);
  EXPECT_EQ(supervisor_.agents_connected(), 1u);
  EXPECT_EQ(supervisor_.nodes().size(), 1u);
  EXPECT_EQ(supervisor_.Report(AtMs(20), first, NodeReportInfo{}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(supervisor_.Report(AtMs(20), second->session, NodeReportInfo{}).ok());
  EXPECT_EQ(supervisor_.reports_received(), 1u);
}

TEST_F(SupervisorTest, HelloAfterDisconnectSupersedesNothing) {
  SessionId first = Connect("node-1");
  supervisor_.Disconnected(AtMs(5), first);

  absl::StatusOr<Supervisor::HelloResult> second = supervisor_.Hello(AtMs(10), MakeHello("node-1"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->superseded, 0u);
}

TEST_F(SupervisorTest, ReportOfUnknownSessionFails) {
  EXPECT_EQ(supervisor_.Report(AtMs(0), 12345, NodeReportInfo{}).code(),
            absl::StatusCode::kFailedPrecondition);
  Connect("node-1");
  EXPECT_EQ(supervisor_.Report(AtMs(0), 12345, NodeReportInfo{}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(supervisor_.reports_received(), 0u);
}

TEST_F(SupervisorTest, ReportAfterDisconnectFails) {
  SessionId session = Connect("node-1");
  supervisor_.Disconnected(AtMs(5), session);
  EXPECT_EQ(supervisor_.Report(AtMs(10), session, NodeReportInfo{}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SupervisorTest, BadHeartbeatsAreCountedByReasonAndGoodOnesApplied) {
  SessionId session = Connect("node-1");
  NodeReportInfo report;
  report.heartbeats.push_back(Step(0, 1));
  Heartbeat bad_kind = Step(1, 1);
  bad_kind.kind = HeartbeatKind::kUnspecified;
  report.heartbeats.push_back(bad_kind);
  Heartbeat negative = Step(1, -3);
  report.heartbeats.push_back(negative);
  report.heartbeats.push_back(Step(1, 2));
  report.heartbeats.push_back(Step(1, 1));  // regressed
  Heartbeat too_big = Step(0, 2);
  too_big.world_size = 8;  // world size mismatch
  report.heartbeats.push_back(too_big);

  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());

  const RejectCounts& rejected = supervisor_.rejected();
  EXPECT_EQ(rejected.Get(RejectReason::kBadKind), 1u);
  EXPECT_EQ(rejected.Get(RejectReason::kNegativeStep), 1u);
  EXPECT_EQ(rejected.Get(RejectReason::kStepRegressed), 1u);
  EXPECT_EQ(rejected.Get(RejectReason::kWorldSizeMismatch), 1u);
  EXPECT_EQ(rejected.Total(), 4u);
  EXPECT_EQ(supervisor_.heartbeats_received(), 2u);
  const Job* job = supervisor_.FindJob("job");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->rank(0).step, 1);
  EXPECT_EQ(job->rank(1).step, 2);
  EXPECT_EQ(job->heartbeats_received(), 2u);
}

TEST_F(SupervisorTest, HeartbeatOfAnotherJobIsJobMismatch) {
  SessionId session = Connect("node-1", "job-a");
  NodeReportInfo report;
  report.heartbeats.push_back(Step(0, 1, "job-b"));

  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());

  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kJobMismatch), 1u);
  EXPECT_EQ(supervisor_.heartbeats_received(), 0u);
  EXPECT_EQ(supervisor_.FindJob("job-b"), nullptr);
  ASSERT_NE(supervisor_.FindJob("job-a"), nullptr);
  EXPECT_EQ(supervisor_.FindJob("job-a")->ranks_reporting(), 0u);
}

TEST_F(SupervisorTest, AgentRejectCountsAreAddedAsDeltas) {
  SessionId session = Connect("node-1");
  NodeReportInfo report;
  report.rejected = {{RejectReason::kOversize, 3}, {RejectReason::kInvalidJson, 1}};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());
  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 3u);
  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kInvalidJson), 1u);

  // The same cumulative counts again: nothing new.
  ASSERT_TRUE(supervisor_.Report(AtMs(20), session, report).ok());
  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 3u);
  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kInvalidJson), 1u);

  report.rejected = {{RejectReason::kOversize, 5}, {RejectReason::kInvalidJson, 1}};
  ASSERT_TRUE(supervisor_.Report(AtMs(30), session, report).ok());
  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 5u);
  EXPECT_EQ(supervisor_.rejected().Total(), 6u);
}

// (Which wire values become kOther is the adapter's: proto_convert_test.)
TEST_F(SupervisorTest, AgentRejectsOfReasonOtherCountAsOther) {
  SessionId session = Connect("node-1");
  NodeReportInfo report;
  report.rejected = {{RejectReason::kOther, 2}};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());
  ASSERT_TRUE(supervisor_.Report(AtMs(20), session, report).ok());

  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOther), 2u);
}

TEST_F(SupervisorTest, AgentRejectCountsOfNodesAreIndependent) {
  SessionId a = Connect("node-a");
  SessionId b = Connect("node-b");
  NodeReportInfo report;
  report.rejected = {{RejectReason::kOversize, 3}};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), a, report).ok());
  ASSERT_TRUE(supervisor_.Report(AtMs(10), b, report).ok());

  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 6u);
}

TEST_F(SupervisorTest, ReconnectOfSameIncarnationKeepsCountingDeltas) {
  SessionId first = Connect("node-1", "job", /*incarnation=*/7);
  NodeReportInfo report;
  report.rejected = {{RejectReason::kOversize, 4}};
  report.dropped_total = 10;
  ASSERT_TRUE(supervisor_.Report(AtMs(10), first, report).ok());

  SessionId second = Connect("node-1", "job", /*incarnation=*/7);
  ASSERT_TRUE(supervisor_.Report(AtMs(20), second, report).ok());

  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 4u);
  EXPECT_EQ(supervisor_.heartbeats_dropped_by_agents(), 10u);
}

TEST_F(SupervisorTest, NewAgentIncarnationCountsFromZero) {
  SessionId first = Connect("node-1", "job", /*incarnation=*/7);
  NodeReportInfo report;
  report.rejected = {{RejectReason::kOversize, 4}};
  report.dropped_total = 10;
  ASSERT_TRUE(supervisor_.Report(AtMs(10), first, report).ok());

  // The agent restarted: its counters started over.
  supervisor_.Disconnected(AtMs(15), first);
  SessionId second = Connect("node-1", "job", /*incarnation=*/8);
  report.rejected = {{RejectReason::kOversize, 1}};
  report.dropped_total = 2;
  ASSERT_TRUE(supervisor_.Report(AtMs(20), second, report).ok());

  EXPECT_EQ(supervisor_.rejected().Get(RejectReason::kOversize), 5u);
  EXPECT_EQ(supervisor_.heartbeats_dropped_by_agents(), 12u);
}

TEST_F(SupervisorTest, DroppedTotalIsAddedAsDeltas) {
  SessionId session = Connect("node-1");
  NodeReportInfo report;
  report.dropped_total = 5;
  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());
  ASSERT_TRUE(supervisor_.Report(AtMs(20), session, report).ok());
  EXPECT_EQ(supervisor_.heartbeats_dropped_by_agents(), 5u);

  report.dropped_total = 9;
  ASSERT_TRUE(supervisor_.Report(AtMs(30), session, report).ok());
  EXPECT_EQ(supervisor_.heartbeats_dropped_by_agents(), 9u);
}

TEST_F(SupervisorTest, DisconnectedMarksTheNodeAndItsRanksDown) {
  SessionId a = Connect("node-a");
  SessionId b = Connect("node-b");
  NodeReportInfo report_a;
  report_a.heartbeats = {Step(0, 1), Step(1, 1)};
  report_a.processes = {AliveProcess(0), AliveProcess(1)};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), a, report_a).ok());
  NodeReportInfo report_b;
  report_b.heartbeats = {Step(2, 1), Step(3, 1)};
  report_b.processes = {AliveProcess(2), AliveProcess(3)};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), b, report_b).ok());
  const Job* job = supervisor_.FindJob("job");
  ASSERT_NE(job, nullptr);
  ASSERT_EQ(job->ranks_alive(), 4u);

  supervisor_.Disconnected(AtMs(20), a);

  EXPECT_FALSE(supervisor_.node(IndexOf("node-a")).connected);
  EXPECT_TRUE(supervisor_.node(IndexOf("node-b")).connected);
  EXPECT_EQ(supervisor_.agents_connected(), 1u);
  EXPECT_FALSE(job->rank(0).alive());
  EXPECT_FALSE(job->rank(1).alive());
  EXPECT_TRUE(job->rank(2).alive());
  EXPECT_TRUE(job->rank(3).alive());
}

TEST_F(SupervisorTest, DisconnectOfASupersededSessionIsIgnored) {
  SessionId first = Connect("node-1");
  SessionId second = Connect("node-1");
  NodeReportInfo report;
  report.heartbeats = {Step(0, 1)};
  report.processes = {AliveProcess(0)};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), second, report).ok());

  supervisor_.Disconnected(AtMs(20), first);

  EXPECT_TRUE(supervisor_.node(0).connected);
  EXPECT_EQ(supervisor_.agents_connected(), 1u);
  EXPECT_TRUE(supervisor_.FindJob("job")->rank(0).alive());
}

TEST_F(SupervisorTest, JobsAreSortedById) {
  Connect("n1", "zeta");
  Connect("n2", "alpha");
  Connect("n3", "mu");
  Connect("n4", "alpha");

  std::vector<const JobEntry*> jobs = supervisor_.Jobs();

  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0]->id(), "alpha");
  EXPECT_EQ(jobs[1]->id(), "mu");
  EXPECT_EQ(jobs[2]->id(), "zeta");
}

TEST_F(SupervisorTest, NodeRecordCarriesLauncherStateAndCounts) {
  SessionId session = Connect("node-1");
  EXPECT_EQ(supervisor_.node(0).launcher.state, LauncherState::kWaiting);

  NodeReportInfo report;
  report.launcher.state = LauncherState::kRunning;
  report.launcher.pid = 4321;
  report.heartbeats = {Step(0, 1), Step(0, 2), Step(0, 0) /* regressed */};
  ASSERT_TRUE(supervisor_.Report(AtMs(50), session, report).ok());

  const NodeRecord& node = supervisor_.node(0);
  EXPECT_EQ(node.launcher.state, LauncherState::kRunning);
  EXPECT_EQ(node.launcher.pid, 4321u);
  EXPECT_EQ(node.heartbeats_received, 2u);
  EXPECT_EQ(node.reports_received, 1u);
  EXPECT_EQ(node.last_report, AtMs(50));

  report.launcher.state = LauncherState::kExited;
  report.launcher.exit_code = 3;
  report.heartbeats = {Step(0, 3)};
  ASSERT_TRUE(supervisor_.Report(AtMs(60), session, report).ok());
  EXPECT_EQ(supervisor_.node(0).launcher.state, LauncherState::kExited);
  EXPECT_EQ(supervisor_.node(0).launcher.exit_code, 3);
  EXPECT_EQ(supervisor_.node(0).heartbeats_received, 3u);
  EXPECT_EQ(supervisor_.node(0).reports_received, 2u);
  EXPECT_EQ(supervisor_.heartbeats_received(), 3u);
}

TEST_F(SupervisorTest, ReportOfAGenerationNeverStartedIsRefusedAndCounted) {
  SessionId session = Connect("node-1");
  // A new job starts at generation 1 (its first launch).
  EXPECT_EQ(supervisor_.FindJob("job")->generation(), 1u);
  NodeReportInfo report;
  report.heartbeats = {Step(0, 10)};
  ASSERT_TRUE(supervisor_.Report(AtMs(10), session, report).ok());

  // The supervisor never started generation 2: nothing of it is trusted.
  NodeReportInfo next;
  next.generation = 2;
  ASSERT_TRUE(supervisor_.Report(AtMs(20), session, next).ok());

  const Job* job = supervisor_.FindJob("job");
  EXPECT_EQ(job->generation(), 1u);
  EXPECT_EQ(job->max_step(), 10);
  EXPECT_EQ(supervisor_.reports_refused(), 1u);
}

}  // namespace
}  // namespace trainsup
