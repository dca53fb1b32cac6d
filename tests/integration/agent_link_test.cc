// The agent's SupervisorLink over real gRPC on loopback: against a fake
// AgentService played by the test (what the link writes, and when), and
// against a real in-process trainsupd (its refusal of a second agent).
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "agent/report_batcher.h"
#include "agent/supervisor_link.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "daemon/server.h"
#include "tests/integration/fake_supervisor.h"
#include "tests/support/wait.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using testing::FakeSupervisor;
using testing::Reports;
using Received = FakeSupervisor::Received;

v1::AgentHello Hello(uint64_t incarnation) {
  v1::AgentHello hello;
  hello.set_node("node-a");
  hello.set_job("j1");
  hello.set_incarnation(incarnation);
  hello.set_generation(1);
  return hello;
}

// The refusals a link reported, collected from its thread.
class Refusals {
 public:
  void Add(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    statuses_.push_back(status);
  }
  std::vector<grpc::Status> Get() const {
    absl::MutexLock lock(&mu_);
    return statuses_;
  }
  size_t size() const { return Get().size(); }

 private:
  mutable absl::Mutex mu_;
  std::vector<grpc::Status> statuses_ ABSL_GUARDED_BY(mu_);
};

class AgentLinkTest : public ::testing::Test {
 protected:
  LinkOptions Options(const std::string& address,
                      absl::Duration report_interval = absl::Milliseconds(20)) {
    LinkOptions options;
    options.address = address;
    options.report_interval = report_interval;
    options.backoff_initial = absl::Milliseconds(20);
    options.backoff_max = absl::Milliseconds(100);
    return options;
  }
  std::unique_ptr<SupervisorLink> StartLink(const LinkOptions& options, uint64_t incarnation = 42) {
    auto link = std::make_unique<SupervisorLink>(
        options, &batcher_, [incarnation] { return Hello(incarnation); },
        [](const v1::SupervisorMessage&) {},
        [this](const grpc::Status& status) { refusals_.Add(status); });
    link->Start();
    return link;
  }

  ReportBatcher batcher_{1024};
  Refusals refusals_;
};

TEST_F(AgentLinkTest, AnIdleLinkReportsEveryIntervalAndSaysItsIntervalInTheHello) {
  FakeSupervisor supervisor;
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address()));

  // Five reports with no news at all: at 20ms apart that takes 0.1s; a link
  // that reported idle only every 2s would take 8s.
  EXPECT_TRUE(supervisor.AwaitReceived(
      [](const std::vector<Received>& r) { return Reports(r).size() >= 5; }, absl::Seconds(1.5)));

  const std::vector<Received> received = supervisor.received();
  ASSERT_FALSE(received.empty());
  ASSERT_TRUE(received[0].message.has_hello());
  EXPECT_DOUBLE_EQ(received[0].message.hello().report_interval_seconds(), 0.02);
  const std::vector<v1::NodeReport> reports = Reports(received);
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].sequence(), reports[i - 1].sequence() + 1);
    EXPECT_EQ(reports[i].heartbeats_size(), 0);
  }
  link->Stop();
}

TEST_F(AgentLinkTest, AQueuedMessageGoesOutBeforeTheNextReport) {
  FakeSupervisor supervisor;
  // A long interval: the queued message must not wait for the report.
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address(), absl::Seconds(30)));
  ASSERT_TRUE(testing::WaitFor([&] { return link->connected(); }));

  v1::AgentMessage stacks;
  stacks.mutable_stacks()->set_generation(1);
  stacks.mutable_stacks()->add_stacks()->set_rank(0);
  link->Send(stacks);
  v1::LauncherStatus stopping;
  stopping.set_state(v1::LauncherStatus::STATE_STOPPING);
  batcher_.SetLauncher(stopping);  // what the agent does next: stop the ranks
  ASSERT_TRUE(link->Flush(absl::Seconds(5)));
  // Written is not yet read: wait for the supervisor's side.
  ASSERT_TRUE(supervisor.AwaitReceived(
      [](const std::vector<Received>& r) { return !Reports(r).empty(); }));

  const std::vector<Received> received = supervisor.received();
  ASSERT_GE(received.size(), 3u);
  EXPECT_TRUE(received[0].message.has_hello());
  ASSERT_TRUE(received[1].message.has_stacks());
  EXPECT_EQ(received[1].message.stacks().stacks(0).rank(), 0u);
  ASSERT_TRUE(received[2].message.has_report());
  EXPECT_EQ(received[2].message.report().launcher().state(), v1::LauncherStatus::STATE_STOPPING);
  link->Stop();
}

TEST_F(AgentLinkTest, AMessageQueuedWhileTheSupervisorIsAwayGoesOnTheNextStream) {
  FakeSupervisor supervisor;
  supervisor.Refuse(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not now"));
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address()));
  v1::AgentMessage stacks;
  stacks.mutable_stacks()->set_generation(4);
  link->Send(stacks);
  ASSERT_TRUE(testing::WaitFor([&] { return supervisor.refusals() >= 1; }));

  supervisor.SetWelcome(v1::Welcome());

  EXPECT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    for (const Received& m : r) {
      if (m.message.has_stacks()) return m.message.stacks().generation() == 4;
    }
    return false;
  }));
  link->Stop();
}

// An agent that is done says its last word and leaves only once the
// supervisor has read it: the stream is closed in order, not cut.
TEST_F(AgentLinkTest, CloseSendsTheLastReportAndReturnsOnceTheSupervisorEndedTheStream) {
  FakeSupervisor supervisor;
  // A long interval: the last report must not wait for it.
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address(), absl::Seconds(30)));
  ASSERT_TRUE(testing::WaitFor([&] { return link->connected(); }));
  v1::LauncherStatus exited;
  exited.set_state(v1::LauncherStatus::STATE_EXITED);
  batcher_.SetLauncher(exited);

  EXPECT_TRUE(link->Close(absl::Seconds(5)));

  const std::vector<v1::NodeReport> reports = Reports(supervisor.received());
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().launcher().state(), v1::LauncherStatus::STATE_EXITED);
  EXPECT_FALSE(link->connected());
}

// The stream broke just before the agent's end: the link dials again and
// says its last word on the new stream.
TEST_F(AgentLinkTest, CloseWhileTheSupervisorIsAwayWaitsForItUpToTheTimeout) {
  FakeSupervisor supervisor;
  supervisor.Refuse(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not now"));
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address()));
  ASSERT_TRUE(testing::WaitFor([&] { return supervisor.refusals() >= 1; }));
  v1::LauncherStatus exited;
  exited.set_state(v1::LauncherStatus::STATE_EXITED);
  batcher_.SetLauncher(exited);

  std::thread welcome([&] {
    absl::SleepFor(absl::Milliseconds(200));  // away for a while, then back
    supervisor.SetWelcome(v1::Welcome());
  });
  EXPECT_TRUE(link->Close(absl::Seconds(5)));
  welcome.join();
  const std::vector<v1::NodeReport> reports = Reports(supervisor.received());
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().launcher().state(), v1::LauncherStatus::STATE_EXITED);
}

TEST_F(AgentLinkTest, CloseGivesUpAtItsTimeoutWhenNoSupervisorAnswers) {
  FakeSupervisor supervisor;
  const std::string address = supervisor.address();
  supervisor.Shutdown();  // nothing listens there any more
  std::unique_ptr<SupervisorLink> link = StartLink(Options(address));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(link->Close(absl::Milliseconds(300)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(AgentLinkTest, ARefusedHelloIsReportedAndRetried) {
  FakeSupervisor supervisor;
  supervisor.Refuse(grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "node node-a is taken"));
  std::unique_ptr<SupervisorLink> link = StartLink(Options(supervisor.address()));

  ASSERT_TRUE(testing::WaitFor([&] { return refusals_.size() >= 2; }));

  const grpc::Status first = refusals_.Get()[0];
  EXPECT_EQ(first.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(first.error_message(), "node node-a is taken");
  EXPECT_FALSE(link->connected());
  link->Stop();
}

TEST_F(AgentLinkTest, AnUnreachableSupervisorIsNoRefusal) {
  FakeSupervisor supervisor;
  const std::string address = supervisor.address();
  supervisor.Shutdown();  // nothing listens there any more
  std::unique_ptr<SupervisorLink> link = StartLink(Options(address));
  // Several attempts go by (the backoff is capped at 100ms) without a refusal.
  EXPECT_FALSE(testing::WaitFor([&] { return refusals_.size() > 0; },
                                std::chrono::milliseconds(500)));
  link->Stop();
}

// A real trainsupd refuses a second agent for a node whose agent is heard,
// and the link hands its status over as it is.
TEST_F(AgentLinkTest, TrainsupdRefusesASecondAgentForANodeAndTheLinkSaysSo) {
  FakeClock clock;  // never moves: the first agent stays heard
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.metrics_listen = "";
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(server_options, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->grpc_address();
  ReportBatcher first_batcher(16);
  SupervisorLink first(
      Options(address), &first_batcher, [] { return Hello(1); },
      [](const v1::SupervisorMessage&) {});
  first.Start();
  ASSERT_TRUE(testing::WaitFor([&] { return first.connected(); }));

  std::unique_ptr<SupervisorLink> second = StartLink(Options(address), /*incarnation=*/2);

  ASSERT_TRUE(testing::WaitFor([&] { return refusals_.size() >= 1; }));
  const grpc::Status refusal = refusals_.Get()[0];
  EXPECT_EQ(refusal.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(refusal.error_message(), HasSubstr("node node-a is served by another agent"));
  EXPECT_FALSE(second->connected());
  EXPECT_TRUE(first.connected());
  second->Stop();
  first.Stop();
  (*server)->Shutdown(absl::ZeroDuration());
}

TEST_F(AgentLinkTest, TheLinkReportsAtTheIntervalTrainsupdTellsIt) {
  FakeClock clock;
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.metrics_listen = "";
  // A budget of 10 reports/s: one agent is told 100 ms, two 200 ms.
  server_options.core.cadence.budget = 10;
  server_options.core.cadence.min_interval = absl::Milliseconds(50);
  server_options.core.cadence.max_interval = absl::Seconds(1);
  server_options.core.cadence.hold = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(server_options, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->grpc_address();
  auto reports = [&] {
    return (*server)->host().Read(
        [](const Supervisor& core, absl::Time) { return core.reports_received(); });
  };

  // Its own interval is 20 ms; the welcome says 100 ms.
  std::unique_ptr<SupervisorLink> first = StartLink(Options(address), /*incarnation=*/1);
  ASSERT_TRUE(testing::WaitFor([&] { return first->connected(); }));
  EXPECT_EQ(first->report_interval(), absl::Milliseconds(100));
  uint64_t before = reports();
  absl::SleepFor(absl::Seconds(1));
  uint64_t heard = reports() - before;
  EXPECT_GE(heard, 7u);   // ~10 at 100 ms
  EXPECT_LE(heard, 13u);  // ~50 at its own 20 ms

  // A second node connects: the first is told 200 ms, the second welcomed so.
  ReportBatcher second_batcher(16);
  SupervisorLink second(
      Options(address), &second_batcher,
      [] {
        v1::AgentHello hello = Hello(2);
        hello.set_node("node-b");
        return hello;
      },
      [](const v1::SupervisorMessage&) {});
  second.Start();
  ASSERT_TRUE(testing::WaitFor([&] { return second.connected(); }));
  EXPECT_EQ(second.report_interval(), absl::Milliseconds(200));
  ASSERT_TRUE(
      testing::WaitFor([&] { return first->report_interval() == absl::Milliseconds(200); }));
  absl::SleepFor(absl::Milliseconds(300));  // the old schedule's last report
  before = reports();
  absl::SleepFor(absl::Seconds(2));
  heard = reports() - before;
  EXPECT_GE(heard, 15u);  // ~20: two agents at 200 ms
  EXPECT_LE(heard, 25u);
  second.Stop();
  first->Stop();
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace trainsup
