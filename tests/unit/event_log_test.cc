#include "daemon/core/event_log.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

Event MakeEvent(const std::string& job, EventKind kind = EventKind::kStall, int64_t at = 0) {
  Event e;
  e.time = AtS(at);
  e.kind = kind;
  e.job = job;
  e.message = "m";
  return e;
}

std::vector<uint64_t> Ids(const std::vector<Event>& events) {
  std::vector<uint64_t> ids;
  for (const Event& e : events) ids.push_back(e.id);
  return ids;
}

TEST(EventLogTest, EmptyLogHasNoEventsAndLastIdZero) {
  EventLog log(10);

  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(log.last_id(), 0u);
  EXPECT_TRUE(log.Since(0).empty());
}

TEST(EventLogTest, IdsStartAtOneAndIncrease) {
  EventLog log(10);

  const Event& first = log.Append(MakeEvent("a"));
  EXPECT_EQ(first.id, 1u);
  EXPECT_EQ(log.Append(MakeEvent("a")).id, 2u);
  EXPECT_EQ(log.Append(MakeEvent("b")).id, 3u);

  EXPECT_EQ(log.last_id(), 3u);
  EXPECT_EQ(Ids(log.Since(0)), (std::vector<uint64_t>{1, 2, 3}));
}

TEST(EventLogTest, AppendIgnoresAnIdSetByTheCaller) {
  EventLog log(10);
  Event e = MakeEvent("a");
  e.id = 42;

  EXPECT_EQ(log.Append(e).id, 1u);
  EXPECT_EQ(log.last_id(), 1u);
}

TEST(EventLogTest, AppendReturnsTheStoredEvent) {
  EventLog log(10);
  Event e = MakeEvent("job-7", EventKind::kCrash, 12);
  e.generation = 3;
  e.rank = 5;
  e.node = "node-b";
  e.message = "rank 5 died first";
  e.figures = {{"exit_code", 1}};

  const Event& stored = log.Append(e);

  EXPECT_EQ(stored.kind, EventKind::kCrash);
  EXPECT_EQ(stored.job, "job-7");
  EXPECT_EQ(stored.time, AtS(12));
  EXPECT_EQ(stored.generation, 3u);
  EXPECT_EQ(stored.rank, 5u);
  EXPECT_EQ(stored.node, "node-b");
  EXPECT_EQ(stored.message, "rank 5 died first");
  ASSERT_EQ(stored.figures.size(), 1u);
  EXPECT_EQ(stored.figures[0].first, "exit_code");
  EXPECT_EQ(stored.figures[0].second, 1);
}

TEST(EventLogTest, FullLogDropsTheOldest) {
  EventLog log(3);
  for (int i = 0; i < 5; ++i) log.Append(MakeEvent("a"));

  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(log.last_id(), 5u);
  EXPECT_EQ(Ids(log.Since(0)), (std::vector<uint64_t>{3, 4, 5}));
}

TEST(EventLogTest, CapacityZeroKeepsOneEvent) {
  EventLog log(0);
  log.Append(MakeEvent("a"));
  log.Append(MakeEvent("a"));

  EXPECT_EQ(log.size(), 1u);
  EXPECT_EQ(Ids(log.Since(0)), (std::vector<uint64_t>{2}));
}

TEST(EventLogTest, SinceReturnsOnlyLaterEventsOldestFirst) {
  EventLog log(10);
  for (int i = 0; i < 5; ++i) log.Append(MakeEvent("a"));

  EXPECT_EQ(Ids(log.Since(2)), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(Ids(log.Since(4)), (std::vector<uint64_t>{5}));
  EXPECT_TRUE(log.Since(5).empty());
  EXPECT_TRUE(log.Since(1000).empty());
}

TEST(EventLogTest, SinceFiltersByJob) {
  EventLog log(10);
  log.Append(MakeEvent("a"));  // 1
  log.Append(MakeEvent("b"));  // 2
  log.Append(MakeEvent("a"));  // 3
  log.Append(MakeEvent("ab"));  // 4: not job "a"
  log.Append(MakeEvent("b"));  // 5

  EXPECT_EQ(Ids(log.Since(0, "a")), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(Ids(log.Since(1, "b")), (std::vector<uint64_t>{2, 5}));
  EXPECT_EQ(Ids(log.Since(0, "")), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(log.Since(0, "c").empty());
}

TEST(EventLogTest, SinceRespectsTheLimit) {
  EventLog log(10);
  for (int i = 0; i < 5; ++i) log.Append(MakeEvent("a"));

  EXPECT_EQ(Ids(log.Since(0, "", 2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(log.Since(3, "", 10)), (std::vector<uint64_t>{4, 5}));
  EXPECT_TRUE(log.Since(0, "", 0).empty());
}

TEST(EventLogTest, LimitCountsOnlyEventsOfTheJob) {
  EventLog log(10);
  log.Append(MakeEvent("b"));  // 1
  log.Append(MakeEvent("a"));  // 2
  log.Append(MakeEvent("b"));  // 3
  log.Append(MakeEvent("a"));  // 4
  log.Append(MakeEvent("a"));  // 5

  EXPECT_EQ(Ids(log.Since(0, "a", 2)), (std::vector<uint64_t>{2, 4}));
}

TEST(EventLogTest, SinceAnIdOlderThanTheOldestKeptReturnsAllKept) {
  EventLog log(3);
  for (int i = 0; i < 7; ++i) log.Append(MakeEvent(i % 2 == 0 ? "a" : "b"));  // keeps 5, 6, 7

  EXPECT_EQ(Ids(log.Since(0)), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(Ids(log.Since(2)), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(Ids(log.Since(4)), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_EQ(Ids(log.Since(5)), (std::vector<uint64_t>{6, 7}));
  EXPECT_EQ(Ids(log.Since(6)), (std::vector<uint64_t>{7}));
  EXPECT_TRUE(log.Since(7).empty());
  // Job "a" is events 1, 3, 5, 7; of those, 5 and 7 are kept.
  EXPECT_EQ(Ids(log.Since(1, "a")), (std::vector<uint64_t>{5, 7}));
  EXPECT_EQ(Ids(log.Since(1, "a", 1)), (std::vector<uint64_t>{5}));
}

TEST(EventLogTest, SinceTheLargestIdIsEmpty) {
  EventLog log(3);
  log.Append(MakeEvent("a"));

  EXPECT_TRUE(log.Since(UINT64_MAX).empty());
}

TEST(EventLogTest, EveryKindHasItsStableName) {
  EXPECT_EQ(EventKindName(EventKind::kStall), "stall");
  EXPECT_EQ(EventKindName(EventKind::kCrash), "crash");
  EXPECT_EQ(EventKindName(EventKind::kStraggler), "straggler");
  EXPECT_EQ(EventKindName(EventKind::kStragglerCleared), "straggler_cleared");
  EXPECT_EQ(EventKindName(EventKind::kCount), "unknown");
}

}  // namespace
}  // namespace trainsup
