// The shared state's log (daemon/ha/etcd_state_log.h) against a real etcd
// (one member on free loopback ports, data in a temporary directory):
// appends fenced on an election key, entries larger than a request split into
// parts, compaction into a snapshot, and a load that gives back what was
// written; and the events through it as trainsupd shares them, one history
// across a takeover. Skipped when etcd is not installed.
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
#include "common/clock.h"
#include "common/free_port.h"
#include "daemon/shared_journal_sink.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tests/support/wait.h"

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
  EXPECT_EQ(log->counts().appended + next->counts().appended, 6u);
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
  EXPECT_EQ(log->counts().refused, 3u);
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

// One elected trainsupd's pieces (docs/ha.md): its store in memory, the
// shared log fenced on its key, the sink, and the host over them.
struct Instance {
  Instance(std::unique_ptr<EtcdStateLog> shared_log, const Clock* clock)
      : store(std::move(*StateStore::OpenInMemory())),
        log(std::move(shared_log)),
        sink(store.get(), log.get(), [](const std::string&) {}),
        host(SupervisorOptions(), clock, store.get(), &sink) {}

  // As a new leader: the shared state into its store, then restored.
  absl::Status Lead() {
    if (absl::Status s = LoadSharedState(log.get(), store.get()); !s.ok()) return s;
    return host.Restore();
  }
  std::vector<Event> Shown() const { return host.Events(0, "", SIZE_MAX); }
  uint64_t Decided() const {
    return host.Read([](const Supervisor& core, absl::Time) { return core.events().last_id(); });
  }

  std::unique_ptr<StateStore> store;
  std::unique_ptr<EtcdStateLog> log;
  SharedJournalSink sink;
  SupervisorHost host;
};

std::vector<std::string> Summary(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    std::string figures;
    for (const auto& [name, value] : e.figures) absl::StrAppend(&figures, " ", name, "=", value);
    out.push_back(absl::StrCat(e.id, " ", EventKindName(e.kind), " ", absl::FormatTime(e.time),
                               " ", e.message, figures));
  }
  return out;
}

TEST_F(EtcdStateLogTest, ALeadersEventsAreTheNextLeadersHistoryAndTheIdsGoOn) {
  FakeClock clock;
  absl::StatusOr<int64_t> epoch_a = Put("/trainsup/test/leader/a", "a");
  ASSERT_TRUE(epoch_a.ok());
  const FencingToken token_a{"/trainsup/test/leader/a", *epoch_a};
  Instance a(Log(&token_a), &clock);  // compacted every 4 entries
  ASSERT_TRUE(a.Lead().ok());
  for (int i = 1; i <= 6; ++i) {
    clock.Advance(absl::Seconds(1));
    a.host.LeadershipChanged("leader", *epoch_a, absl::StrCat("decision ", i));
  }
  a.host.FlushWrites();
  ASSERT_TRUE(testing::WaitFor([&] { return a.Shown().size() == 6; }));
  const std::vector<Event> committed = a.Shown();
  // Seeded (empty), then compacted at 4 entries: 4 events in the snapshot,
  // 2 in the log after it.
  EXPECT_EQ(a.log->counts().compactions, 2u);

  // Deposed: its key is gone, another instance's holds the leadership. Its
  // next event is refused by etcd: void, never shown.
  Delete(token_a.key);
  absl::StatusOr<int64_t> epoch_b = Put("/trainsup/test/leader/b", "b");
  ASSERT_TRUE(epoch_b.ok());
  a.host.LeadershipChanged("leader", *epoch_a, "decided after it lost");
  a.host.FlushWrites();
  EXPECT_EQ(a.Decided(), 7u);
  a.host.LeadershipChanged("standby", 0, "lost");  // publishes at once
  EXPECT_EQ(Summary(a.Shown()), Summary(committed));

  // The new leader shows them as they were, and numbers on from them: its
  // first event takes the id of the deposed leader's void one.
  const FencingToken token_b{"/trainsup/test/leader/b", *epoch_b};
  Instance b(Log(&token_b), &clock);
  ASSERT_TRUE(b.Lead().ok());
  EXPECT_EQ(Summary(b.Shown()), Summary(committed));
  b.host.LeadershipChanged("leader", *epoch_b, "took over");
  b.host.FlushWrites();
  ASSERT_TRUE(testing::WaitFor([&] { return b.Shown().size() == 7; }));
  const std::vector<Event> history = b.Shown();
  EXPECT_EQ(Summary({history.begin(), history.begin() + 6}), Summary(committed));
  EXPECT_EQ(history.back().id, 7u);
  EXPECT_EQ(history.back().message, absl::StrCat("leader (epoch ", *epoch_b, "): took over"));
}

}  // namespace
}  // namespace trainsup
