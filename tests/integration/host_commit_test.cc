// The host commits journals off the mutex that agent streams take: with the
// store's writes held (a slow disk), reports keep flowing, and commands and
// fences wait for their commit; a commit that fails is not acted on.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "daemon/core/supervisor.h"
#include "daemon/fence_runner.h"
#include "daemon/journal_writer.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/wait.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

// A store whose commits wait while the test holds them, or fail on demand.
class LatchedSink : public JournalSink {
 public:
  absl::Status Apply(const Journal& journal, Sync sync) override {
    absl::MutexLock lock(&mu_);
    ++started_;
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_; };
    mu_.Await(absl::Condition(&released));
    if (!error_.ok()) return error_;
    ++committed_;
    if (sync == Sync::kFull) ++full_;
    return absl::OkStatus();
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    held_ = false;
  }
  void FailWith(absl::Status error) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
  }
  int started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  int full() {
    absl::MutexLock lock(&mu_);
    return full_;
  }

 private:
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int committed_ ABSL_GUARDED_BY(mu_) = 0;
  int full_ ABSL_GUARDED_BY(mu_) = 0;
};

// An agent's outbox that keeps what it was sent.
class RecordingChannel : public AgentChannel {
 public:
  void Send(const v1::SupervisorMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (message.has_quarantined()) ++quarantines_;
    epochs_.push_back(message.epoch());
  }
  void Close(const grpc::Status&) override {}
  int quarantines() {
    absl::MutexLock lock(&mu_);
    return quarantines_;
  }
  // The epoch of every message sent, in order (the welcome first).
  std::vector<uint64_t> epochs() {
    absl::MutexLock lock(&mu_);
    return epochs_;
  }

 private:
  absl::Mutex mu_;
  int quarantines_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> epochs_ ABSL_GUARDED_BY(mu_);
};

class HostCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/host_commit_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fenced_ = dir_ + "/fenced";
    script_ = dir_ + "/fence.sh";
    {
      std::ofstream out(script_);
      out << "#!/bin/sh\necho \"$1\" >> '" << fenced_ << "'\n";
    }
    ASSERT_EQ(chmod(script_.c_str(), 0755), 0);
    host_ = std::make_unique<SupervisorHost>(SupervisorOptions(), &clock_, nullptr, &sink_);
    fence_ = std::make_unique<FenceRunner>(
        FenceRunner::Commands{script_, ""}, absl::Seconds(10),
        [this](const FenceRequest& request, bool ok, const std::string& detail) {
          host_->FenceDone(request, ok, detail);
        });
    host_->set_fence_runner(fence_.get());
    for (const char* node : {"node-a", "node-b"}) {
      AgentHelloInfo hello;
      hello.node = node;
      hello.job = "j1";
      hello.incarnation = 1;
      auto channel = std::make_shared<RecordingChannel>();
      absl::StatusOr<Supervisor::HelloResult> said = host_->Hello(hello, channel);
      ASSERT_TRUE(said.ok()) << said.status();
      sessions_.push_back(said->session);
      channels_.push_back(channel);
    }
    host_->FlushWrites();
  }

  void TearDown() override {
    sink_.Release();
    host_->set_fence_runner(nullptr);
    fence_.reset();
    host_.reset();
    unlink(fenced_.c_str());
    unlink(script_.c_str());
    rmdir(dir_.c_str());
  }

  // A report of node-a's two ranks at `step`.
  NodeReportInfo Report(int64_t step) {
    NodeReportInfo report;
    report.sequence = static_cast<uint64_t>(step);
    report.generation = 1;
    report.launcher.state = LauncherState::kRunning;
    for (uint32_t rank = 0; rank < 2; ++rank) {
      Heartbeat hb;
      hb.kind = HeartbeatKind::kStep;
      hb.job = "j1";
      hb.rank = rank;
      hb.local_rank = rank;
      hb.world_size = 4;
      hb.pid = 100 + rank;
      hb.step = step;
      hb.step_duration_s = 0.1;
      hb.generation = 1;
      report.heartbeats.push_back(hb);
    }
    return report;
  }

  uint64_t ReportsReceived() {
    return host_->Read([](const Supervisor& core, absl::Time) { return core.reports_received(); });
  }

  bool Fenced() { return access(fenced_.c_str(), F_OK) == 0; }

  FakeClock clock_;
  LatchedSink sink_;
  std::unique_ptr<SupervisorHost> host_;
  std::unique_ptr<FenceRunner> fence_;
  std::vector<SessionId> sessions_;
  std::vector<std::shared_ptr<RecordingChannel>> channels_;
  std::string dir_, fenced_, script_;
};

TEST_F(HostCommitTest, ReportsFlowWhileACommitIsHeld) {
  sink_.Hold();
  // Something to commit, so that the writer is stuck in the store.
  ASSERT_TRUE(host_->Quarantine("node-b", "bad GPU 3").ok());
  ASSERT_TRUE(WaitFor([&] { return sink_.started() >= 1; }));

  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 50; ++step) {
    ASSERT_TRUE(host_->Report(sessions_[0], Report(step)).ok());
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_EQ(ReportsReceived(), 50u);  // applied, not waiting for the store
  EXPECT_LT(elapsed, std::chrono::seconds(2));
  sink_.Release();
}

TEST_F(HostCommitTest, AFenceAndItsCommandWaitForTheirCommit) {
  sink_.Hold();

  ASSERT_TRUE(host_->Quarantine("node-b", "bad GPU 3").ok());
  host_->Sweep();  // tells the agents
  ASSERT_TRUE(WaitFor([&] { return sink_.started() >= 1; }));

  // Decided, not committed: nobody outside has been told.
  EXPECT_TRUE(host_->Read([](const Supervisor& core, absl::Time) {
    return core.quarantine().IsQuarantined("node-b");
  }));
  EXPECT_FALSE(Fenced());
  EXPECT_EQ(channels_[1]->quarantines(), 0);

  sink_.Release();

  EXPECT_TRUE(WaitFor([&] { return Fenced(); }));
  EXPECT_TRUE(WaitFor([&] { return channels_[1]->quarantines() == 1; }));
  EXPECT_GE(sink_.full(), 1);  // the quarantine was fsynced before its fence
}

TEST_F(HostCommitTest, EveryMessageCarriesTheEpochOfTheLeadershipThatDecidedIt) {
  // Welcomed before any election: epoch 0, a trainsupd alone.
  EXPECT_EQ(channels_[1]->epochs(), std::vector<uint64_t>({0}));
  host_->LeadershipChanged("leader", 42, "won the election");
  ASSERT_TRUE(host_->Quarantine("node-b", "bad GPU 3").ok());
  host_->Sweep();
  ASSERT_TRUE(WaitFor([&] { return channels_[1]->quarantines() == 1; }));
  EXPECT_EQ(channels_[1]->epochs(), std::vector<uint64_t>({0, 42}));
  // Suspended, then leading again: the same leadership, the same epoch.
  host_->LeadershipChanged("suspended", 42, "cannot renew");
  host_->LeadershipChanged("leader", 42, "renewed");
  AgentHelloInfo hello;
  hello.node = "node-c";
  hello.job = "j1";
  hello.incarnation = 1;
  auto channel = std::make_shared<RecordingChannel>();
  ASSERT_TRUE(host_->Hello(hello, channel).ok());
  EXPECT_EQ(channel->epochs().front(), 42u);
}

TEST_F(HostCommitTest, ADecisionThatCannotBePersistedIsNotActedOn) {
  sink_.FailWith(absl::ResourceExhaustedError("state database x: disk full"));

  ASSERT_TRUE(host_->Quarantine("node-b", "bad GPU 3").ok());
  host_->FlushWrites();
  host_->FlushWrites();  // and the persist_failed event's own (failing) commit

  EXPECT_FALSE(Fenced());
  EXPECT_EQ(channels_[1]->quarantines(), 0);
  EXPECT_GE(host_->persist_failures(), 1u);
  // Events reach readers with the snapshot that reflects them, published
  // apart from the core.
  std::vector<std::string> failed;
  WaitFor([&] {
    failed.clear();
    for (const Event& e : host_->Events(0, "", SIZE_MAX)) {
      if (e.kind == EventKind::kPersistFailed) failed.push_back(e.message);
    }
    return !failed.empty();
  });
  ASSERT_EQ(failed.size(), 1u);  // the event's own failed commit is only counted
  EXPECT_THAT(failed[0], HasSubstr("not acted on"));
  EXPECT_THAT(failed[0], HasSubstr("fence node-b"));
  EXPECT_THAT(failed[0], HasSubstr("disk full"));
}

// The newest event readers see (0: none).
uint64_t LastShown(const SupervisorHost& host) {
  const std::vector<Event> shown = host.Events(0, "", SIZE_MAX);
  return shown.empty() ? 0 : shown.back().id;
}

uint64_t LastDecided(const SupervisorHost& host) {
  return host.Read([](const Supervisor& core, absl::Time) { return core.events().last_id(); });
}

TEST_F(HostCommitTest, AnEventIsShownOnceCommittedAndNeverWhenItsJournalWasVoid) {
  ASSERT_TRUE(WaitFor([&] { return LastShown(*host_) == LastDecided(*host_); }));
  const uint64_t committed = LastShown(*host_);

  sink_.Hold();
  host_->LeadershipChanged("leader", 5, "won the election");  // published at once
  ASSERT_GT(LastDecided(*host_), committed);
  EXPECT_EQ(LastShown(*host_), committed);  // its event waits for its commit
  sink_.Release();
  ASSERT_TRUE(WaitFor([&] { return LastShown(*host_) == LastDecided(*host_); }));
  const uint64_t led = LastShown(*host_);

  // Fenced: the journal is void, its event never shown (a follower that saw
  // it would skip the event a new leader gives its id).
  sink_.FailWith(absl::AbortedError("fenced: another instance leads"));
  host_->LeadershipChanged("standby", 0, "lost the election");
  host_->FlushWrites();
  host_->LeadershipChanged("standby", 0, "lost the election");  // publishes now
  host_->FlushWrites();
  EXPECT_EQ(LastDecided(*host_), led + 2);
  EXPECT_EQ(LastShown(*host_), led);

  // A store that failed: the event is shown (the operator must see it),
  // and with it those before.
  sink_.FailWith(absl::ResourceExhaustedError("state database x: disk full"));
  host_->LeadershipChanged("leader", 6, "won again");
  EXPECT_TRUE(WaitFor([&] { return LastShown(*host_) == led + 3; }));
}

TEST(HostRestoreTest, TheHistoryRestoredIsShownAtOnceAndItsIdsGoOn) {
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::OpenInMemory();
  ASSERT_TRUE(store.ok()) << store.status();
  {
    SupervisorHost first(SupervisorOptions(), &clock, store->get());
    ASSERT_TRUE(first.Restore().ok());
    for (int64_t epoch : {1, 2, 3}) first.LeadershipChanged("leader", epoch, "won");
    first.FlushWrites();
  }
  SupervisorHost next(SupervisorOptions(), &clock, store->get());
  ASSERT_TRUE(next.Restore().ok());
  EXPECT_EQ(LastShown(next), 3u);  // no wait: the first call after a takeover sees them
  next.LeadershipChanged("leader", 4, "won");
  EXPECT_EQ(LastDecided(next), 4u);
}

}  // namespace
}  // namespace trainsup
