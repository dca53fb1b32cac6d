// A host that stops acting and acts again (an elected trainsupd whose lease
// lapsed, docs/ha.md) starts over from what it committed, as a new leader
// would: while it did not act it heard no agent, so that silence must not
// read as lost nodes or a stalled job when it acts again.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/core/supervisor.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"
#include "gtest/gtest.h"
#include "tests/support/null_channel.h"

namespace trainsup {
namespace {

class HostResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::OpenInMemory();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    SupervisorOptions options;
    options.stall.floor = absl::Seconds(3);
    host_ = std::make_unique<SupervisorHost>(options, &clock_, store_.get());
    ASSERT_TRUE(host_->Restore().ok());
    HelloAll();
    for (int64_t step = 0; step < 20; ++step) {
      ReportAll(step);
      clock_.Advance(absl::Milliseconds(100));
    }
    host_->Sweep();
    host_->FlushWrites();
    ASSERT_EQ(JobState(), "running");
  }

  void HelloAll() {
    sessions_.clear();
    for (const char* node : {"node-a", "node-b"}) {
      AgentHelloInfo hello;
      hello.node = node;
      hello.job = "j1";
      hello.incarnation = 1;
      hello.generation = 1;
      absl::StatusOr<Supervisor::HelloResult> said =
          host_->Hello(hello, std::make_shared<testing::NullChannel>());
      ASSERT_TRUE(said.ok()) << said.status();
      sessions_.push_back(said->session);
    }
  }

  // Every rank at `step`: node-a holds ranks 0 and 1, node-b 2 and 3.
  void ReportAll(int64_t step) {
    for (uint32_t n = 0; n < sessions_.size(); ++n) {
      NodeReportInfo report;
      report.sequence = static_cast<uint64_t>(step + 1);
      report.generation = 1;
      report.launcher.state = LauncherState::kRunning;
      for (uint32_t local = 0; local < 2; ++local) {
        Heartbeat hb;
        hb.kind = HeartbeatKind::kStep;
        hb.job = "j1";
        hb.rank = 2 * n + local;
        hb.local_rank = local;
        hb.world_size = 4;
        hb.pid = 100 + hb.rank;
        hb.step = step;
        hb.step_duration_s = 0.1;
        hb.generation = 1;
        report.heartbeats.push_back(hb);
      }
      ASSERT_TRUE(host_->Report(sessions_[n], report).ok());
    }
  }

  std::string JobState() {
    return host_->Read([](const Supervisor& core, absl::Time now) {
      std::optional<JobView> view = core.ViewOf("j1", now);
      return view ? std::string(JobStateName(view->state)) : std::string("none");
    });
  }

  static std::vector<std::string> Kinds(const std::vector<Event>& events) {
    std::vector<std::string> kinds;
    for (const Event& e : events) kinds.emplace_back(EventKindName(e.kind));
    return kinds;
  }

  FakeClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<SupervisorHost> host_;
  std::vector<SessionId> sessions_;
};

// The hazard: the same core, swept after 12 s it did not listen, reads the
// agents it refused as lost.
TEST_F(HostResumeTest, WithoutStartingOverThePauseReadsAsLostNodes) {
  clock_.Advance(absl::Seconds(12));
  const std::vector<std::string> kinds = Kinds(host_->Sweep());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "node_lost"), kinds.end());
}

TEST_F(HostResumeTest, ActingAgainStartsOverFromTheCommittedStateAndChargesNoOne) {
  const SessionId before = sessions_.back();
  clock_.Advance(absl::Seconds(12));  // not acting: nothing heard
  ASSERT_TRUE(host_->Restore().ok());

  EXPECT_TRUE(host_->Sweep().empty());
  EXPECT_EQ(JobState(), "running");  // the job, as committed
  // The agents say hello again; their new sessions are not the old ones.
  HelloAll();
  EXPECT_GT(sessions_.front(), before);
  for (int64_t step = 20; step < 30; ++step) {
    ReportAll(step);
    clock_.Advance(absl::Milliseconds(100));
  }
  for (const std::string& kind : Kinds(host_->Sweep())) {
    EXPECT_TRUE(kind == "checkpoint_plan" || kind == "rendezvous") << kind;
  }
  EXPECT_EQ(JobState(), "running");
  EXPECT_EQ(host_->Read([](const Supervisor& core, absl::Time) {
              return core.FindJob("j1")->generation();
            }),
            1u);
  // Still watched: a silence once it acts again is evidence, as ever.
  clock_.Advance(absl::Seconds(10));
  const std::vector<std::string> kinds = Kinds(host_->Sweep());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "node_lost"), kinds.end())
      << ::testing::PrintToString(kinds);
}

TEST_F(HostResumeTest, AfterStartingOverAStallWaitsForEveryNodeToComeBack) {
  clock_.Advance(absl::Seconds(12));
  ASSERT_TRUE(host_->Restore().ok());
  // node-a is back at once, its ranks waiting at the step the job hung at;
  // node-b (where the hung rank may be) is not back yet.
  HelloAll();
  sessions_.pop_back();
  ReportAll(19);
  clock_.Advance(Detection::kRejoinGrace - absl::Seconds(1));
  for (const std::string& kind : Kinds(host_->Sweep())) {
    EXPECT_TRUE(kind == "checkpoint_plan" || kind == "rendezvous") << kind;
  }
  // Past the grace the job is judged on what is seen (node-b said hello
  // and fell silent: lost).
  clock_.Advance(absl::Seconds(2));
  const std::vector<std::string> kinds = Kinds(host_->Sweep());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "node_lost"), kinds.end())
      << ::testing::PrintToString(kinds);
}

}  // namespace
}  // namespace trainsup
