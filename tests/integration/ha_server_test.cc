// HaServer's handling of an election, against a fake one (ElectionBackend),
// over real gRPC on loopback: a standby refuses every call naming the
// leader; elected, it acts and says so in GetSupervisorStatus; suspended, it
// stops acting and acts again when confirmed; deposed after leading, it
// starts over as a fresh standby on the same port; a leader that cannot
// read the shared state resigns; a shutdown resigns. The election itself,
// against a real etcd, is tests/e2e's ha_election.
#include "daemon/ha_server.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

// What a test sees of the fake election and log it handed to the server,
// shared so that it outlives them.
struct Observed {
  std::atomic<bool> resigned{false};
  std::atomic<int> appended{0};
};

// An election whose state the test sets.
class FakeElection : public Election {
 public:
  FakeElection(const Clock* clock, std::shared_ptr<Observed> observed)
      : deadline_(clock), observed_(std::move(observed)) {}

  ElectionState Current() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  ElectionState Await(uint64_t seen, absl::Duration timeout) const override {
    absl::MutexLock lock(&mu_);
    const absl::Time end = absl::Now() + timeout;
    while (state_.changes == seen && !changed_.WaitWithDeadline(&mu_, end)) {
    }
    return state_;
  }
  void Resign() override {
    observed_->resigned = true;
    Set(Leadership::Role::kStandby, 0, "", "resigned");
  }
  FencingToken Token() const override {
    absl::MutexLock lock(&mu_);
    return {"election/a", state_.epoch};
  }
  const ActingDeadline& acting_deadline() const override { return deadline_; }
  const std::string& election_name() const override { return name_; }
  absl::StatusOr<std::vector<Candidate>> Candidates() const override {
    return std::vector<Candidate>{{"a 127.0.0.1:1", 10}, {"b 127.0.0.1:7999", 12}};
  }
  absl::Duration last_renew_latency() const override { return absl::Milliseconds(3); }

  void Set(Leadership::Role role, int64_t epoch, std::string leader, std::string reason) {
    absl::MutexLock lock(&mu_);
    state_.role = role;
    state_.epoch = epoch;
    state_.leader = std::move(leader);
    state_.reason = std::move(reason);
    ++state_.changes;
    deadline_.Set(role == Leadership::Role::kLeader ? absl::InfiniteFuture()
                                                    : absl::InfinitePast());
    changed_.SignalAll();
  }

 private:
  ActingDeadline deadline_;
  const std::string name_ = "/trainsup/test/election";
  const std::shared_ptr<Observed> observed_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  ElectionState state_ ABSL_GUARDED_BY(mu_);
};

// A shared log in memory, empty to begin with; its writes are refused
// unless elected. `load_error`: Load fails (the shared state cannot be read).
class FakeLog : public SharedLog {
 public:
  FakeLog(std::function<FencingToken()> token, std::shared_ptr<Observed> observed,
          absl::Status load_error)
      : token_(std::move(token)), observed_(std::move(observed)), load_error_(load_error) {}

  absl::StatusOr<Loaded> Load() override {
    if (!load_error_.ok()) return load_error_;
    return Loaded{};
  }
  absl::Status Append(const std::string&) override {
    if (token_().epoch == 0) return absl::FailedPreconditionError("not elected");
    ++observed_->appended;
    return absl::OkStatus();
  }
  absl::Status Compact(const std::string&) override { return absl::OkStatus(); }
  bool CompactionDue() const override { return false; }

 private:
  const std::function<FencingToken()> token_;
  const std::shared_ptr<Observed> observed_;
  const absl::Status load_error_;
};

class FakeBackend : public ElectionBackend {
 public:
  FakeBackend(std::shared_ptr<Observed> observed, FakeElection** election,
              absl::Status load_error)
      : observed_(std::move(observed)), election_(election), load_error_(load_error) {}

  absl::StatusOr<std::unique_ptr<SharedLog>> MakeLog(
      std::function<FencingToken()> token) override {
    return std::make_unique<FakeLog>(std::move(token), observed_, load_error_);
  }
  absl::StatusOr<std::unique_ptr<Election>> StartElection(const std::string&,
                                                          const Clock* clock) override {
    auto election = std::make_unique<FakeElection>(clock, observed_);
    *election_ = election.get();
    return std::unique_ptr<Election>(std::move(election));
  }
  std::string Where() const override { return "a fake"; }

 private:
  const std::shared_ptr<Observed> observed_;
  FakeElection** const election_;
  const absl::Status load_error_;
};

class HaServerTest : public ::testing::Test {
 protected:
  void Start(absl::Status load_error = absl::OkStatus()) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    HaOptions ha;
    ha.instance = "a";
    absl::StatusOr<std::unique_ptr<HaServer>> server = HaServer::Start(
        options, ha, &clock_,
        std::make_unique<FakeBackend>(observed_, &election_, load_error));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_NE(election_, nullptr);
    address_ = server_->grpc_address();
    stub_ = v1::OperatorService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  grpc::Status Call(v1::SupervisorStatus* status) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return stub_->GetSupervisorStatus(&context, v1::GetSupervisorStatusRequest(), status);
  }

  // Waits up to 10 s for a call answered as `ok` whose refusal (when not
  // ok) holds `refusal`; returns the last answer.
  v1::SupervisorStatus AwaitAnswer(bool ok, const std::string& refusal = "") {
    v1::SupervisorStatus status;
    grpc::Status last;
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (absl::Now() < end) {
      status.Clear();
      last = Call(&status);
      if (last.ok() == ok && (ok || absl::StrContains(last.error_message(), refusal))) {
        return status;
      }
      absl::SleepFor(absl::Milliseconds(20));  // polling a gRPC answer, not synchronizing
    }
    ADD_FAILURE() << "no " << (ok ? "answer" : "refusal with '" + refusal + "'")
                  << " in 10s; last: " << last.error_code() << " " << last.error_message();
    return status;
  }

  MonotonicClock clock_;
  std::shared_ptr<Observed> observed_ = std::make_shared<Observed>();
  FakeElection* election_ = nullptr;  // owned by server_
  std::unique_ptr<HaServer> server_;
  std::string address_;
  std::unique_ptr<v1::OperatorService::Stub> stub_;
};

TEST_F(HaServerTest, AStandbyRefusesEveryCallNamingTheLeader) {
  Start();
  AwaitAnswer(false, "standby: no leader elected yet");
  election_->Set(Leadership::Role::kStandby, 0, "b 127.0.0.1:7999", "b won");
  AwaitAnswer(false, "standby: the leader is b 127.0.0.1:7999");
  EXPECT_FALSE(observed_->resigned);
}

TEST_F(HaServerTest, ElectedItActsAndSaysWhoLeadsSinceWhenAndWhoIsInLine) {
  Start();
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "won");
  const v1::SupervisorStatus status = AwaitAnswer(true);
  EXPECT_TRUE(status.elected());
  EXPECT_EQ(status.instance(), "a");
  EXPECT_EQ(status.address(), address_);
  EXPECT_EQ(status.epoch(), 7);
  EXPECT_EQ(status.election(), "/trainsup/test/election");
  EXPECT_TRUE(status.has_leading_since());
  ASSERT_EQ(status.instances_size(), 2);
  EXPECT_EQ(status.instances(0).name(), "a");
  EXPECT_TRUE(status.instances(0).leader());
  EXPECT_EQ(status.instances(1).name(), "b");
  EXPECT_EQ(status.instances(1).address(), "127.0.0.1:7999");
  EXPECT_FALSE(status.instances(1).leader());
}

TEST_F(HaServerTest, SuspendedItStopsActingAndActsAgainWhenConfirmed) {
  Start();
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "won");
  AwaitAnswer(true);
  election_->Set(Leadership::Role::kSuspended, 7, "a 127.0.0.1:1", "etcd unreachable");
  AwaitAnswer(false, "suspended");
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "renewed");
  EXPECT_EQ(AwaitAnswer(true).epoch(), 7);
}

TEST_F(HaServerTest, DeposedAfterLeadingItStartsOverAsAFreshStandbyOnTheSamePort) {
  Start();
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "won");
  AwaitAnswer(true);
  election_->Set(Leadership::Role::kStandby, 0, "b 127.0.0.1:7999", "lease lost");
  AwaitAnswer(false, "standby: the leader is b 127.0.0.1:7999");
  EXPECT_EQ(server_->grpc_address(), address_);
  // Elected again (a new epoch): the fresh server reads the shared state and
  // acts.
  election_->Set(Leadership::Role::kLeader, 9, "a 127.0.0.1:1", "won again");
  EXPECT_EQ(AwaitAnswer(true).epoch(), 9);
  EXPECT_FALSE(observed_->resigned);
}

TEST_F(HaServerTest, ALeaderThatCannotReadTheSharedStateResignsInsteadOfActing) {
  Start(absl::UnavailableError("etcd: deadline exceeded"));
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "won");
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (!observed_->resigned && absl::Now() < end) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(observed_->resigned);
  v1::SupervisorStatus status;
  EXPECT_FALSE(Call(&status).ok());  // never acted
}

TEST_F(HaServerTest, AShutdownResignsSoAnotherInstanceTakesOverAtOnce) {
  Start();
  election_->Set(Leadership::Role::kLeader, 7, "a 127.0.0.1:1", "won");
  AwaitAnswer(true);
  server_->Shutdown();
  EXPECT_TRUE(observed_->resigned);
}

}  // namespace
}  // namespace trainsup
