// The shared state's log (daemon/ha/etcd_state_log.h) against a real etcd
// (one member on free loopback ports, data in a temporary directory):
// appends fenced on an election key, entries larger than a request split into
// parts, compaction into a snapshot, and a load that gives back what was
// written. Skipped when etcd is not installed.
#include "daemon/ha/etcd_state_log.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/free_port.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace trainsup {
namespace {

constexpr const char* kEtcd = "/usr/bin/etcd";

class EtcdStateLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kEtcd, X_OK) != 0) GTEST_SKIP() << kEtcd << " is not installed";
    std::string tmpl = ::testing::TempDir() + "etcd_state_log_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    const std::string client = absl::StrCat("http://127.0.0.1:", FreePort());
    const std::string peer = absl::StrCat("http://127.0.0.1:", FreePort());
    pid_ = fork();
    if (pid_ == 0) {
      freopen("/dev/null", "w", stderr);
      execl(kEtcd, kEtcd, "--name", "e1", "--data-dir", (dir_ + "/data").c_str(),
            "--listen-client-urls", client.c_str(), "--advertise-client-urls", client.c_str(),
            "--listen-peer-urls", peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(),
            "--initial-cluster", ("e1=" + peer).c_str(), nullptr);
      _exit(127);
    }
    channel_ = grpc::CreateChannel(client.substr(7), grpc::InsecureChannelCredentials());
    kv_ = etcdserverpb::KV::NewStub(channel_);
    // Up when it answers a write (a fresh member elects itself in ~1s).
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!Put("/t/up", "1").ok()) {
      ASSERT_LT(absl::Now(), deadline) << "etcd did not start";
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Puts `key`; returns its create revision.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value) {
    etcdserverpb::PutRequest put;
    put.set_key(key);
    put.set_value(value);
    etcdserverpb::PutResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    context.set_wait_for_ready(true);  // while etcd starts
    grpc::Status s = kv_->Put(&context, put, &response);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    return response.header().revision();
  }

  void Delete(const std::string& key) {
    etcdserverpb::DeleteRangeRequest request;
    request.set_key(key);
    etcdserverpb::DeleteRangeResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(kv_->DeleteRange(&context, request, &response).ok());
  }

  size_t CountKeys(const std::string& prefix) {
    etcdserverpb::RangeRequest request;
    request.set_key(prefix);
    request.set_range_end(PrefixEnd(prefix));
    request.set_count_only(true);
    etcdserverpb::RangeResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(kv_->Range(&context, request, &response).ok());
    return static_cast<size_t>(response.count());
  }

  // A log fenced on `*token`, with small parts and compaction every 4 entries.
  std::unique_ptr<EtcdStateLog> Log(const FencingToken* token) {
    EtcdStateLog::Options options;
    options.key_prefix = "/trainsup/test/";
    options.max_part_bytes = 1000;
    options.compaction = {4, 1u << 30};
    return std::make_unique<EtcdStateLog>(channel_, options, [token] { return *token; });
  }

  std::string dir_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
};

TEST_F(EtcdStateLogTest, WhatIsAppendedAndCompactedLoadsBackInOrder) {
  absl::StatusOr<int64_t> epoch = Put("/trainsup/test/leader/a", "a 127.0.0.1:1");
  ASSERT_TRUE(epoch.ok());
  const FencingToken token{"/trainsup/test/leader/a", *epoch};
  std::unique_ptr<EtcdStateLog> log = Log(&token);
  absl::StatusOr<SharedLog::Loaded> empty = log->Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());

  const std::string big(2500, 'x');  // three parts
  ASSERT_TRUE(log->Append("one").ok());
  ASSERT_TRUE(log->Append("").ok());  // only checks the fence: no entry
  ASSERT_TRUE(log->Append(big).ok());
  EXPECT_EQ(CountKeys("/trainsup/test/part/"), 3u);
  EXPECT_FALSE(log->CompactionDue());
  absl::StatusOr<SharedLog::Loaded> loaded = Log(&token)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "");
  EXPECT_EQ(loaded->entries, (std::vector<std::string>{"one", big}));

  ASSERT_TRUE(log->Append("three").ok());
  ASSERT_TRUE(log->Append("four").ok());
  EXPECT_TRUE(log->CompactionDue());
  const std::string snapshot(1500, 's');  // two parts
  ASSERT_TRUE(log->Compact(snapshot).ok());
  EXPECT_FALSE(log->CompactionDue());
  ASSERT_TRUE(log->Append("five").ok());
  // The compacted log is gone from etcd: one entry, the snapshot's parts.
  EXPECT_EQ(CountKeys("/trainsup/test/log/"), 1u);
  EXPECT_EQ(CountKeys("/trainsup/test/part/"), 0u);
  EXPECT_EQ(CountKeys("/trainsup/test/snap/"), 2u);

  // A new leader's instance: the snapshot, then what came after it, and it
  // appends after the last entry.
  std::unique_ptr<EtcdStateLog> next = Log(&token);
  loaded = next->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, snapshot);
  EXPECT_EQ(loaded->entries, (std::vector<std::string>{"five"}));
  ASSERT_TRUE(next->Append("six").ok());
  ASSERT_TRUE(next->Compact("t").ok());  // an older snapshot is deleted
  EXPECT_EQ(CountKeys("/trainsup/test/snap/"), 1u);
  loaded = Log(&token)->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->snapshot, "t");
  EXPECT_TRUE(loaded->entries.empty());
  EXPECT_EQ(log->appended() + next->appended(), 6u);
}

TEST_F(EtcdStateLogTest, AWriteOfADeposedLeaderIsRefusedAndNothingOfItIsWritten) {
  absl::StatusOr<int64_t> epoch = Put("/trainsup/test/leader/a", "a");
  ASSERT_TRUE(epoch.ok());
  const FencingToken token{"/trainsup/test/leader/a", *epoch};
  std::unique_ptr<EtcdStateLog> log = Log(&token);
  ASSERT_TRUE(log->Load().ok());
  ASSERT_TRUE(log->Append("decided while leading").ok());
  // The key expires (its lease) and another instance's key is created: the
  // same name, a new create revision.
  Delete(token.key);
  ASSERT_TRUE(Put("/trainsup/test/leader/a", "b").ok());
  absl::Status refused = log->Append("decided after");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(log->Append(std::string(2500, 'y')).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(log->Compact("snapshot").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(log->refused(), 3u);
  EXPECT_EQ(CountKeys("/trainsup/test/log/"), 1u);
  EXPECT_EQ(CountKeys("/trainsup/test/part/"), 0u);
  EXPECT_EQ(CountKeys("/trainsup/test/snap/"), 0u);
  // Not elected at all: refused without asking etcd.
  const FencingToken none;
  EXPECT_EQ(Log(&none)->Append("x").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EtcdStateLogTest, AGapInTheLogIsDataLoss) {
  absl::StatusOr<int64_t> epoch = Put("/trainsup/test/leader/a", "a");
  ASSERT_TRUE(epoch.ok());
  const FencingToken token{"/trainsup/test/leader/a", *epoch};
  std::unique_ptr<EtcdStateLog> log = Log(&token);
  ASSERT_TRUE(log->Load().ok());
  ASSERT_TRUE(log->Append("1").ok());
  ASSERT_TRUE(log->Append("2").ok());
  ASSERT_TRUE(log->Append("3").ok());
  Delete(StateKeys("/trainsup/test/").Log(2));
  EXPECT_EQ(Log(&token)->Load().status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace trainsup
