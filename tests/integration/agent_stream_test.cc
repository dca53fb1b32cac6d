// trainsupd's AgentService and OperatorService over real gRPC on loopback.
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "agent/report_batcher.h"
#include "agent/supervisor_link.h"
#include "common/clock.h"
#include "daemon/server.h"
#include "tests/support/wait.h"
#include "trainsup/v1/agent.grpc.pb.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {
namespace {
using ::testing::HasSubstr;
using testing::WaitFor;
using testing::WaitFor;

std::unique_ptr<Server> StartServer(const Clock* clock, const std::string& listen = "127.0.0.1:0") {
  ServerOptions options;
  options.listen = listen;
  options.metrics_listen = "";  // the HTTP endpoint is covered end to end
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, clock);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

v1::RankHeartbeat Step(const std::string& job, uint32_t rank, uint32_t world, int64_t step,
                       double seconds) {
  v1::RankHeartbeat hb;
  hb.set_kind(v1::HEARTBEAT_KIND_STEP);
  hb.set_job(job);
  hb.set_rank(rank);
  hb.set_local_rank(rank % 2);
  hb.set_world_size(world);
  hb.set_pid(1000 + rank);
  hb.set_step(step);
  hb.set_step_duration_seconds(seconds);
  hb.set_generation(1);
  return hb;
}

// One agent played by hand over a raw stream.
class FakeAgent {
 public:
  FakeAgent(const std::string& address, const std::string& node, const std::string& job)
      : stub_(v1::AgentService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        stream_(stub_->Connect(&context_)),
        node_(node),
        job_(job) {}

  // `fields`: more of the hello (the test's node, job, incarnation and
  // generation 1 are set over them).
  bool SayHello(uint64_t incarnation = 7, const v1::AgentHello& fields = v1::AgentHello()) {
    v1::AgentMessage m;
    *m.mutable_hello() = fields;
    m.mutable_hello()->set_node(node_);
    m.mutable_hello()->set_job(job_);
    m.mutable_hello()->set_incarnation(incarnation);
    m.mutable_hello()->set_generation(1);
    return stream_->Write(m);
  }
  bool Send(const v1::NodeReport& report) {
    v1::AgentMessage m;
    *m.mutable_report() = report;
    return stream_->Write(m);
  }
  bool Read(v1::SupervisorMessage* m) { return stream_->Read(m); }
  grpc::Status Finish() {
    stream_->WritesDone();
    v1::SupervisorMessage ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }
  // Reads until the server ends the stream; returns its status.
  grpc::Status AwaitEnd() {
    v1::SupervisorMessage ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SupervisorMessage>> stream_;
  std::string node_;
  std::string job_;
};

class AgentStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(&clock_);
    ASSERT_NE(server_, nullptr);
    operator_ = v1::OperatorService::NewStub(
        grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status ListRanks(const std::string& job, v1::ListRanksResponse* response) {
    grpc::ClientContext context;
    v1::ListRanksRequest request;
    request.set_job_id(job);
    return operator_->ListRanks(&context, request, response);
  }
  // Waits until ListRanks(job) has `n` ranks; returns the last response.
  v1::ListRanksResponse AwaitRanks(const std::string& job, int n) {
    v1::ListRanksResponse response;
    WaitFor([&] {
      response.Clear();
      return ListRanks(job, &response).ok() && response.ranks_size() == n;
    });
    return response;
  }

  FakeClock clock_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::OperatorService::Stub> operator_;
};

TEST_F(AgentStreamTest, TwoAgentsReportTheirRanksAndRanksAnswersWhatWasSent) {
  FakeAgent a(server_->grpc_address(), "node-a", "j1");
  FakeAgent b(server_->grpc_address(), "node-b", "j1");
  ASSERT_TRUE(a.SayHello());
  ASSERT_TRUE(b.SayHello());
  v1::SupervisorMessage welcome;
  ASSERT_TRUE(a.Read(&welcome));
  EXPECT_TRUE(welcome.has_welcome());
  EXPECT_EQ(welcome.welcome().supervisor_incarnation(), server_->host().incarnation());

  v1::NodeReport ra;
  *ra.add_heartbeats() = Step("j1", 0, 4, 10, 0.5);
  *ra.add_heartbeats() = Step("j1", 1, 4, 11, 0.25);
  ASSERT_TRUE(a.Send(ra));
  v1::NodeReport rb;
  *rb.add_heartbeats() = Step("j1", 2, 4, 12, 1.0);
  *rb.add_heartbeats() = Step("j1", 3, 4, 13, 2.0);
  ASSERT_TRUE(b.Send(rb));

  v1::ListRanksResponse ranks = AwaitRanks("j1", 4);
  ASSERT_EQ(ranks.ranks_size(), 4);
  EXPECT_EQ(ranks.world_size(), 4u);
  const char* nodes[] = {"node-a", "node-a", "node-b", "node-b"};
  const double seconds[] = {0.5, 0.25, 1.0, 2.0};
  for (int i = 0; i < 4; ++i) {
    const v1::Rank& r = ranks.ranks(i);
    EXPECT_EQ(r.rank(), static_cast<uint32_t>(i));
    EXPECT_EQ(r.node(), nodes[i]);
    EXPECT_EQ(r.step(), 10 + i);
    EXPECT_EQ(r.pid(), 1000u + i);
    EXPECT_DOUBLE_EQ(r.step_p99_seconds(), seconds[i]);
  }
  EXPECT_TRUE(a.Finish().ok());
  EXPECT_TRUE(b.Finish().ok());
}

TEST_F(AgentStreamTest, UnknownJobIsNotFound) {
  v1::ListRanksResponse response;
  grpc::Status s = ListRanks("nope", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("nope"), std::string::npos);
}

TEST_F(AgentStreamTest, ReportBeforeHelloEndsTheStreamWithAClearError) {
  FakeAgent a(server_->grpc_address(), "node-a", "j1");
  v1::NodeReport report;
  *report.add_heartbeats() = Step("j1", 0, 1, 1, 0.1);
  ASSERT_TRUE(a.Send(report));
  grpc::Status s = a.AwaitEnd();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "report before hello");
}

TEST_F(AgentStreamTest, BadNodeNameIsRefusedAtHello) {
  FakeAgent a(server_->grpc_address(), "node a/../b", "j1");
  ASSERT_TRUE(a.SayHello());
  grpc::Status s = a.AwaitEnd();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("node name"), std::string::npos);
}

// Where the job meets travels in the welcome: the first agent to launch
// hosts torchrun's rendezvous store at the address and port it offered,
// and the next is told to meet there.
TEST_F(AgentStreamTest, TheWelcomeSaysWhereTheGenerationMeets) {
  auto offering = [](const std::string& address, uint32_t port) {
    v1::AgentHello hello;
    hello.mutable_launcher()->set_state(v1::LauncherStatus::STATE_WAITING);
    hello.mutable_rendezvous()->set_kind(v1::RendezvousOffer::KIND_C10D);
    hello.mutable_rendezvous()->set_address(address);
    hello.mutable_rendezvous()->set_port(port);
    return hello;
  };
  FakeAgent b(server_->grpc_address(), "node-b", "j1");
  ASSERT_TRUE(b.SayHello(7, offering("127.0.0.2", 4002)));
  v1::SupervisorMessage welcome_b;
  ASSERT_TRUE(b.Read(&welcome_b));
  FakeAgent a(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(a.SayHello(8, offering("127.0.0.1", 4001)));
  v1::SupervisorMessage welcome_a;
  ASSERT_TRUE(a.Read(&welcome_a));

  ASSERT_TRUE(welcome_b.has_welcome() && welcome_a.has_welcome());
  EXPECT_TRUE(welcome_a.welcome().launch());
  const v1::Rendezvous& at_b = welcome_b.welcome().rendezvous();
  const v1::Rendezvous& at_a = welcome_a.welcome().rendezvous();
  EXPECT_EQ(at_b.host_node(), "node-b");
  EXPECT_EQ(at_a.host_node(), "node-b");
  EXPECT_EQ(at_a.address(), "127.0.0.2");
  EXPECT_EQ(at_a.port(), 4002u);
  EXPECT_EQ(at_b.node_rank(), 0u);
  EXPECT_EQ(at_a.node_rank(), 1u);

  // An offer no peer could reach is refused with the hello.
  FakeAgent c(server_->grpc_address(), "node-c", "j1");
  ASSERT_TRUE(c.SayHello(9, offering("127.0.0.3", 70000)));
  grpc::Status refused = c.AwaitEnd();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("rendezvous port 70000"));
  a.Finish();
  b.Finish();
}

TEST_F(AgentStreamTest, BadHeartbeatsAreCountedAndTheStreamLivesOn) {
  FakeAgent a(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(a.SayHello());
  v1::NodeReport report;
  *report.add_heartbeats() = Step("j1", 5, 4, 1, 0.1);   // rank out of range
  *report.add_heartbeats() = Step("other", 0, 4, 1, 0.1);  // not the agent's job
  *report.add_heartbeats() = Step("j1", 0, 4, 3, 0.1);
  *report.add_heartbeats() = Step("j1", 0, 4, 2, 0.1);   // backwards
  ASSERT_TRUE(a.Send(report));
  v1::ListRanksResponse ranks = AwaitRanks("j1", 1);
  ASSERT_EQ(ranks.ranks_size(), 1);
  EXPECT_EQ(ranks.ranks(0).step(), 3);
  auto count = [&](RejectReason reason) {
    return server_->host().Read([reason](const Supervisor& s, absl::Time) { return s.rejected().Get(reason); });
  };
  EXPECT_EQ(count(RejectReason::kRankOutOfRange), 1u);
  EXPECT_EQ(count(RejectReason::kJobMismatch), 1u);
  EXPECT_EQ(count(RejectReason::kStepRegressed), 1u);
  EXPECT_TRUE(a.Finish().ok());
}

TEST_F(AgentStreamTest, TheSameAgentReconnectingSupersedesItsOldStream) {
  FakeAgent first(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(first.SayHello(1));
  v1::SupervisorMessage welcome;
  ASSERT_TRUE(first.Read(&welcome));
  FakeAgent second(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(second.SayHello(1));  // the same incarnation: its old stream is half dead
  grpc::Status s = first.AwaitEnd();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  ASSERT_TRUE(second.Read(&welcome));
  EXPECT_TRUE(welcome.has_welcome());
  EXPECT_TRUE(second.Finish().ok());
}

TEST_F(AgentStreamTest, ASecondAgentForANodeWhoseAgentIsHeardIsRefused) {
  FakeAgent first(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(first.SayHello(1));
  v1::SupervisorMessage welcome;
  ASSERT_TRUE(first.Read(&welcome));
  FakeAgent second(server_->grpc_address(), "node-a", "j1");
  ASSERT_TRUE(second.SayHello(2));  // another agent process with the same --node

  grpc::Status s = second.AwaitEnd();

  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("node node-a is served by another agent"));
  // The first goes on undisturbed.
  v1::NodeReport report;
  report.set_generation(1);
  ASSERT_TRUE(first.Send(report));
  EXPECT_EQ(server_->host().Read([](const Supervisor& core, absl::Time) {
    return core.agents_connected();
  }), 1u);
  EXPECT_TRUE(first.Finish().ok());
}

// The agent's own link: reports flow, and after a supervisor restart on the
// same address the new supervisor learns the ranks' state again without any
// new heartbeat (a hung job must stay visible across a supervisor restart).
TEST_F(AgentStreamTest, AgentLinkReconnectsAndResendsStateToARestartedSupervisor) {
  const std::string address = server_->grpc_address();
  ReportBatcher batcher(1024);
  batcher.SetGeneration(1);
  LinkOptions options;
  options.address = address;
  options.report_interval = absl::Milliseconds(20);
  options.backoff_initial = absl::Milliseconds(20);
  options.backoff_max = absl::Milliseconds(100);
  SupervisorLink link(
      options, &batcher,
      [] {
        v1::AgentHello hello;
        hello.set_node("node-a");
        hello.set_job("j1");
        hello.set_incarnation(42);
        hello.set_generation(1);
        return hello;
      },
      [](const v1::SupervisorMessage&) {});
  link.Start();
  batcher.AddHeartbeat(Step("j1", 0, 2, 7, 0.1));
  batcher.AddHeartbeat(Step("j1", 1, 2, 7, 0.1));
  EXPECT_EQ(AwaitRanks("j1", 2).ranks_size(), 2);

  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  server_ = StartServer(&clock_, address);
  ASSERT_NE(server_, nullptr);
  operator_ = v1::OperatorService::NewStub(
      grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials()));
  v1::ListRanksResponse ranks = AwaitRanks("j1", 2);
  ASSERT_EQ(ranks.ranks_size(), 2);
  EXPECT_EQ(ranks.ranks(0).step(), 7);
  EXPECT_EQ(ranks.ranks(1).step(), 7);
  EXPECT_GE(link.sessions(), 2u);
  link.Stop();
}


// `ranks` at scale: the supervisor sorts, filters and limits, and streams a
// listing too large for one message in pages, all from one snapshot.
class RankListingTest : public AgentStreamTest {
 protected:
  // Node "node-<k>" reports ranks [k * per_node, (k + 1) * per_node) of a
  // `world`-rank job; rank r's compute p99 is r / 1000 s, rank `slow` the
  // slowest of all, and rank `behind` is at step 1 where the rest are at 5.
  void Report(uint32_t world, uint32_t per_node, uint32_t slow, uint32_t behind) {
    for (uint32_t k = 0; k * per_node < world; ++k) {
      agents_.push_back(std::make_unique<FakeAgent>(server_->grpc_address(),
                                                   absl::StrCat("node-", k), "big"));
      FakeAgent& agent = *agents_.back();
      ASSERT_TRUE(agent.SayHello());
      v1::NodeReport report;
      for (uint32_t r = k * per_node; r < std::min(world, (k + 1) * per_node); ++r) {
        v1::RankHeartbeat hb = Step("big", r, world, r == behind ? 1 : 5, 1.0);
        hb.set_compute_seconds(r == slow ? 9.0 : r / 1000.0);
        *report.add_heartbeats() = hb;
      }
      ASSERT_TRUE(agent.Send(report));
    }
  }
  grpc::Status List(const v1::ListRanksRequest& request, v1::ListRanksResponse* response) {
    grpc::ClientContext context;
    return operator_->ListRanks(&context, request, response);
  }
  static v1::ListRanksRequest Request(v1::RankSort sort, uint32_t limit) {
    v1::ListRanksRequest request;
    request.set_job_id("big");
    request.set_sort(sort);
    request.set_limit(limit);
    return request;
  }
  std::vector<std::unique_ptr<FakeAgent>> agents_;
};

TEST_F(RankListingTest, TopNBySortIsChosenOnTheServer) {
  Report(/*world=*/64, /*per_node=*/8, /*slow=*/17, /*behind=*/40);
  AwaitRanks("big", 64);
  v1::ListRanksResponse top;

  ASSERT_TRUE(List(Request(v1::RANK_SORT_COMPUTE_P99, 3), &top).ok());
  ASSERT_EQ(top.ranks_size(), 3);
  EXPECT_EQ(top.ranks(0).rank(), 17u);  // the slowest first
  EXPECT_EQ(top.ranks(1).rank(), 63u);
  EXPECT_EQ(top.ranks(2).rank(), 62u);
  EXPECT_EQ(top.matched(), 64u);
  EXPECT_EQ(top.summary().ranks(), 64u);
  EXPECT_DOUBLE_EQ(top.summary().compute_p99_max_seconds(), 9.0);
  EXPECT_EQ(top.summary().min_step(), 1);
  EXPECT_EQ(top.summary().max_step(), 5);

  v1::ListRanksResponse behind;
  ASSERT_TRUE(List(Request(v1::RANK_SORT_STEP, 1), &behind).ok());
  ASSERT_EQ(behind.ranks_size(), 1);
  EXPECT_EQ(behind.ranks(0).rank(), 40u);

  v1::ListRanksRequest one_node = Request(v1::RANK_SORT_RANK, 0);
  one_node.set_node("node-2");
  v1::ListRanksResponse node;
  ASSERT_TRUE(List(one_node, &node).ok());
  ASSERT_EQ(node.ranks_size(), 8);
  EXPECT_EQ(node.ranks(0).rank(), 16u);
  EXPECT_EQ(node.matched(), 8u);
  for (const v1::Rank& r : node.ranks()) EXPECT_EQ(r.node(), "node-2");

  v1::ListRanksRequest dead = Request(v1::RANK_SORT_RANK, 0);
  dead.set_flag(v1::RANK_FLAG_DEAD);
  v1::ListRanksResponse none;
  ASSERT_TRUE(List(dead, &none).ok());
  EXPECT_EQ(none.ranks_size(), 0);
  EXPECT_EQ(none.summary().ranks(), 64u);  // the summary is the whole job's
}

TEST_F(RankListingTest, AListingLargerThanOneAnswerIsRefusedWithAWayOutAndStreamedInPages) {
  constexpr uint32_t kWorld = 20000;  // > 16384 per answer, 5 pages of 4096
  Report(kWorld, /*per_node=*/2500, /*slow=*/0, /*behind=*/1);
  WaitFor([&] {
    v1::ListRanksResponse top;
    return List(Request(v1::RANK_SORT_RANK, 1), &top).ok() && top.matched() == kWorld;
  });

  v1::ListRanksResponse whole;
  grpc::Status refused = List(Request(v1::RANK_SORT_RANK, 0), &whole);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--top N"));

  grpc::ClientContext context;
  auto reader = operator_->StreamRanks(&context, Request(v1::RANK_SORT_RANK, 0));
  v1::ListRanksResponse page;
  int pages = 0;
  uint32_t next = 0;
  while (reader->Read(&page)) {
    ++pages;
    EXPECT_EQ(page.matched(), kWorld);
    EXPECT_EQ(page.has_summary(), pages == 1);
    for (const v1::Rank& r : page.ranks()) EXPECT_EQ(r.rank(), next++);
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(pages, 5);
  EXPECT_EQ(next, kWorld);
}

TEST_F(RankListingTest, AReaderThatStopsReadingDoesNotHoldIngestUp) {
  Report(/*world=*/20000, /*per_node=*/2500, /*slow=*/0, /*behind=*/1);
  WaitFor([&] {
    v1::ListRanksResponse top;
    return List(Request(v1::RANK_SORT_RANK, 1), &top).ok() && top.matched() == 20000;
  });
  // Opens a listing and never reads it: its pages fill the flow-control
  // window and the server's writer waits.
  grpc::ClientContext stalled;
  auto reader = operator_->StreamRanks(&stalled, Request(v1::RANK_SORT_RANK, 0));

  const auto reports = [&] {
    return server_->host().Read([](const Supervisor& core, absl::Time) { return core.reports_received(); });
  };
  const uint64_t before = reports();
  v1::NodeReport report;
  *report.add_heartbeats() = Step("big", 0, 20000, 6, 1.0);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(agents_[0]->Send(report));
  EXPECT_TRUE(WaitFor([&] { return reports() >= before + 50; }));
  // And other readers are answered meanwhile.
  v1::ListRanksResponse top;
  EXPECT_TRUE(List(Request(v1::RANK_SORT_COMPUTE_P99, 20), &top).ok());
  stalled.TryCancel();
}

// `trainsupctl diagnose` over real gRPC: what two agents reported, judged.
class DiagnoseRpcTest : public AgentStreamTest {
 protected:
  // 30 steps of `step_s` on ranks 0, 1 (node-a) and 2, 3 (node-b),
  // computing 0.18 s of each; node-b's ranks wait `wait_b` of each step for
  // data.
  void Report(double step_s, double wait_b) {
    a_ = std::make_unique<FakeAgent>(server_->grpc_address(), "node-a", "j1");
    b_ = std::make_unique<FakeAgent>(server_->grpc_address(), "node-b", "j1");
    ASSERT_TRUE(a_->SayHello());
    ASSERT_TRUE(b_->SayHello());
    for (int64_t step = 1; step <= 30; ++step) {
      v1::NodeReport ra;
      v1::NodeReport rb;
      for (uint32_t r = 0; r < 4; ++r) {
        v1::RankHeartbeat hb = Step("j1", r, 4, step, step_s);
        hb.set_compute_seconds(0.18);
        if (r >= 2) hb.set_data_wait_seconds(wait_b);
        *(r < 2 ? ra : rb).add_heartbeats() = hb;
      }
      ASSERT_TRUE(a_->Send(ra));
      ASSERT_TRUE(b_->Send(rb));
    }
    WaitFor([&] {
      return server_->host().Read([](const Supervisor& core, absl::Time) {
        const Job* job = core.FindJob("j1");
        return job != nullptr && job->heartbeats_received() == 120;
      });
    });
  }
  grpc::Status Diagnose(const std::string& job, v1::DiagnoseResponse* response) {
    grpc::ClientContext context;
    v1::DiagnoseRequest request;
    request.set_job_id(job);
    return operator_->Diagnose(&context, request, response);
  }
  static const v1::Finding& Check(const v1::DiagnoseResponse& d, const std::string& check) {
    for (const v1::Finding& f : d.findings()) {
      if (f.check() == check) return f;
    }
    ADD_FAILURE() << "no finding " << check;
    return d.findings(0);
  }
  std::unique_ptr<FakeAgent> a_;
  std::unique_ptr<FakeAgent> b_;
};

TEST_F(DiagnoseRpcTest, ANodeWaitingForDataIsInputBound) {
  Report(/*step_s=*/0.3, /*wait_b=*/0.1);
  v1::DiagnoseResponse d;
  ASSERT_TRUE(Diagnose("j1", &d).ok());
  EXPECT_EQ(d.job_id(), "j1");
  EXPECT_EQ(d.verdict(), "input_bound") << d.headline();
  EXPECT_EQ(d.state(), "running");
  ASSERT_GE(d.findings_size(), 5);
  EXPECT_EQ(d.findings(0).check(), "progress");
  EXPECT_EQ(d.findings(0).status(), "ok");
  const v1::Finding& input = Check(d, "input");
  EXPECT_EQ(input.status(), "problem");
  EXPECT_EQ(input.node(), "node-b");
  EXPECT_NEAR(input.figures().at("node_share"), 0.1 / 0.3, 1e-3);
  EXPECT_NEAR(input.figures().at("rank_share"), 0.1 / 0.3, 1e-3);
  EXPECT_EQ(input.figures().at("nodes_over"), 1);
  // Outside compute and data wait: 0.02 s of node-b's steps, 0.12 s of
  // node-a's (they wait for node-b in the collective); the lower middle.
  EXPECT_NEAR(Check(d, "communication").figures().at("comm_share"), 0.02 / 0.3, 1e-3);
  EXPECT_TRUE(a_->Finish().ok());
  EXPECT_TRUE(b_->Finish().ok());
}

TEST_F(DiagnoseRpcTest, ACleanJobIsHealthy) {
  Report(/*step_s=*/0.2, /*wait_b=*/0.0);
  v1::DiagnoseResponse d;
  ASSERT_TRUE(Diagnose("j1", &d).ok());
  EXPECT_EQ(d.verdict(), "healthy") << d.headline();
  EXPECT_NEAR(Check(d, "input").figures().at("node_share"), 0.0, 1e-9);
  EXPECT_NEAR(Check(d, "communication").figures().at("comm_share"), 0.1, 1e-3);
  EXPECT_TRUE(a_->Finish().ok());
  EXPECT_TRUE(b_->Finish().ok());
}

TEST_F(DiagnoseRpcTest, AnUnknownJobIsNotFound) {
  v1::DiagnoseResponse d;
  const grpc::Status s = Diagnose("nope", &d);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("nope"));
}

}  // namespace
}  // namespace trainsup
