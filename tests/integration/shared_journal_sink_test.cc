// SharedJournalSink (daemon/shared_journal_sink.h) on a store in memory and
// a scripted shared log: a journal counts as committed only once the shared
// log took it; while etcd does not answer the decision waits (and what
// follows it queues behind); a refused write stops the instance (and is
// void); events are shared, stacks are not; the log is compacted when due;
// LoadSharedState seeds an empty log or replaces the store's shared tables.
#include "daemon/shared_journal_sink.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "daemon/journal_writer.h"
#include "daemon/state_store.h"

namespace trainsup {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// A shared log whose Append answers, in turn, what the test scripted (OK
// once the script is spent), and keeps what it took.
class ScriptedLog : public SharedLog {
 public:
  absl::StatusOr<Loaded> Load() override { return loaded; }
  absl::Status Append(const std::string& changes) override {
    absl::MutexLock lock(&mu);
    ++attempts;
    if (!script.empty()) {
      absl::Status s = script.front();
      script.pop_front();
      return s;
    }
    if (!changes.empty()) entries.push_back(changes);
    return absl::OkStatus();
  }
  absl::Status Compact(const std::string& snapshot) override {
    absl::MutexLock lock(&mu);
    snapshots.push_back(snapshot);
    entries.clear();
    return absl::OkStatus();
  }
  bool CompactionDue() const override {
    absl::MutexLock lock(&mu);
    return entries.size() >= compact_at;
  }

  mutable absl::Mutex mu;
  std::deque<absl::Status> script;
  std::vector<std::string> entries;
  std::vector<std::string> snapshots;
  int attempts = 0;
  size_t compact_at = 1000;
  Loaded loaded;
};

Journal Quarantine(const std::string& node) {
  Journal j;
  j.nodes.push_back({node, true, "bad gpu", kT0, "policy"});
  j.fences.push_back({node, "bad gpu", kT0, true, FenceAction::kFence});
  return j;
}

std::unique_ptr<StateStore> MemoryStore() {
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::OpenInMemory();
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

TEST(SharedJournalSinkTest, ADecisionWaitsWhileEtcdDoesNotAnswerAndWhatFollowsQueuesBehind) {
  std::unique_ptr<StateStore> store = MemoryStore();
  ScriptedLog log;
  log.script = {absl::UnavailableError("etcd away"), absl::DeadlineExceededError("slow"),
                absl::UnavailableError("etcd away")};
  bool fenced = false;
  SharedJournalSink sink(store.get(), &log, [&](const std::string&) { fenced = true; });
  JournalWriter writer(&sink);
  std::vector<std::string> acted;  // on the writer's thread, in order
  writer.Write(Quarantine("n1"), JournalSink::Sync::kFull, [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    acted.push_back("n1");
  });
  writer.Write(Quarantine("n2"), JournalSink::Sync::kFull, [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    acted.push_back("n2");
  });
  writer.Flush();
  EXPECT_EQ(acted, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(log.attempts, 5);  // three unanswered, then one each
  EXPECT_EQ(log.entries.size(), 2u);
  EXPECT_FALSE(fenced);
}

TEST(SharedJournalSinkTest, ARefusedWriteIsNotCommittedAndStopsTheInstance) {
  std::unique_ptr<StateStore> store = MemoryStore();
  ScriptedLog log;
  log.script = {absl::FailedPreconditionError("fenced: another instance leads")};
  std::string why;
  SharedJournalSink sink(store.get(), &log, [&](const std::string& w) { why = w; });
  const absl::Status s = sink.Apply(Quarantine("n1"), JournalSink::Sync::kFull);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);  // void: its events are not shown
  EXPECT_EQ(why, "fenced: another instance leads");
  EXPECT_TRUE(log.entries.empty());
}

TEST(SharedJournalSinkTest, EventsAreSharedStacksOnlyCheckTheFenceAndTheLogIsCompactedWhenDue) {
  std::unique_ptr<StateStore> store = MemoryStore();
  ScriptedLog log;
  log.compact_at = 3;
  SharedJournalSink sink(store.get(), &log, [](const std::string&) {});
  // An event alone: one history, an entry of the log.
  Journal history;
  Event e;
  e.id = 1;
  e.time = kT0;
  e.kind = EventKind::kStall;
  e.job = "j1";
  e.figures = {{"threshold_seconds", 3}};
  history.events.push_back(e);
  ASSERT_TRUE(sink.Apply(history, JournalSink::Sync::kNormal).ok());
  EXPECT_EQ(log.attempts, 1);
  EXPECT_EQ(log.entries.size(), 1u);
  // Stacks are this instance's own: nothing to append, the fence is checked.
  Journal stacks;
  stacks.stacks.push_back({"j1", 1, 1, kT0, 0.1, std::nullopt, 0, "n1", true, "x"});
  ASSERT_TRUE(sink.Apply(stacks, JournalSink::Sync::kNormal).ok());
  EXPECT_EQ(log.attempts, 2);  // asked, with nothing to append
  EXPECT_EQ(log.entries.size(), 1u);
  ASSERT_TRUE(sink.Apply(Quarantine("n1"), JournalSink::Sync::kNormal).ok());
  ASSERT_TRUE(sink.Apply(Quarantine("n2"), JournalSink::Sync::kNormal).ok());
  ASSERT_EQ(log.snapshots.size(), 1u);
  // The snapshot is the store's shared state: it gives another store all.
  std::unique_ptr<StateStore> other = MemoryStore();
  ASSERT_TRUE(other->ReplaceShared({log.snapshots[0]}).ok());
  absl::StatusOr<PersistedState> state = other->Load(10, 10, 10);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->nodes.size(), 2u);
  EXPECT_EQ(state->fences.size(), 2u);
  ASSERT_EQ(state->events.size(), 1u);
  EXPECT_EQ(state->events[0].figures, e.figures);
  EXPECT_TRUE(state->stacks.empty());
}

TEST(SharedJournalSinkTest, LoadSeedsAnEmptyLogOrReplacesTheSharedTables) {
  // The first leader: etcd holds nothing; its own store seeds it.
  std::unique_ptr<StateStore> first = MemoryStore();
  ASSERT_TRUE(first->Apply(Quarantine("n1")).ok());
  ScriptedLog empty;
  ASSERT_TRUE(LoadSharedState(&empty, first.get()).ok());
  ASSERT_EQ(empty.snapshots.size(), 1u);
  EXPECT_FALSE(empty.snapshots[0].empty());

  // The next: its stale row goes, the shared state comes.
  std::unique_ptr<StateStore> next = MemoryStore();
  ASSERT_TRUE(next->Apply(Quarantine("stale")).ok());
  ScriptedLog shared;
  shared.loaded.snapshot = empty.snapshots[0];
  std::string changes;
  std::unique_ptr<StateStore> scratch = MemoryStore();
  ASSERT_TRUE(scratch->ReplaceShared({empty.snapshots[0]}).ok());
  ASSERT_TRUE(scratch->Apply(Quarantine("n2"), JournalSink::Sync::kNormal, &changes).ok());
  shared.loaded.entries = {changes};
  ASSERT_TRUE(LoadSharedState(&shared, next.get()).ok());
  EXPECT_TRUE(shared.snapshots.empty());
  absl::StatusOr<PersistedState> state = next->Load(10, 10, 10);
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->nodes.size(), 2u);
  EXPECT_EQ(state->nodes[0].name, "n1");
  EXPECT_EQ(state->nodes[1].name, "n2");
}

}  // namespace
}  // namespace trainsup
