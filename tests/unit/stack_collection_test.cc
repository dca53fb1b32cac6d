// Which ranks a stack collection asks, when each has answered, what is
// reported (agent/stack_collection.h), in fake steady time.
#include "agent/stack_collection.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int kSignal = 40;

absl::Duration T(double seconds) { return absl::Seconds(100) + absl::Seconds(seconds); }

ProcessObservation Rank(uint32_t rank, uint64_t generation, bool alive, int stack_signal) {
  ProcessObservation o;
  o.process.set_rank(rank);
  o.process.set_local_rank(rank % 2);
  o.process.set_pid(1000 + rank);
  o.process.set_generation(generation);
  o.process.set_alive(alive);
  o.stack_signal = stack_signal;
  return o;
}

std::vector<uint32_t> TargetRanks(const StackCollection& c) {
  std::vector<uint32_t> ranks;
  for (const StackCollection::Target& t : c.targets()) ranks.push_back(t.rank);
  return ranks;
}

TEST(StackCollectionTest, AsksTheLiveRanksOfTheGenerationThatHaveAStackSignal) {
  StackCollection c(2, {Rank(0, 2, true, kSignal), Rank(1, 2, true, 0), Rank(2, 2, false, kSignal),
                        Rank(3, 1, true, kSignal), Rank(4, 2, true, kSignal + 1)});
  EXPECT_THAT(TargetRanks(c), ElementsAre(0u, 4u));
  EXPECT_EQ(c.targets()[0].pid, 1000);
  EXPECT_EQ(c.targets()[0].signal, kSignal);
  EXPECT_EQ(c.targets()[1].signal, kSignal + 1);
  // Every rank of the generation is reported; the others are not.
  std::vector<uint32_t> reported;
  for (const StackCollection::Result& r : c.Results()) reported.push_back(r.rank);
  EXPECT_THAT(reported, ElementsAre(0u, 1u, 2u, 4u));
}

TEST(StackCollectionTest, NobodyToAskIsDoneAtOnce) {
  StackCollection c(1, {Rank(0, 1, true, 0), Rank(1, 1, false, kSignal)});
  EXPECT_THAT(c.targets(), IsEmpty());
  EXPECT_TRUE(c.Done(T(0)));
  for (const StackCollection::Result& r : c.Results()) EXPECT_FALSE(r.answered);
}

TEST(StackCollectionTest, ARankHasAnsweredOnceItsFileGrewAndStayedQuiet) {
  StackCollection c(1, {Rank(0, 1, true, kSignal)});
  c.Asked(0, 500, true);
  c.Observe(0, 500, T(0.02));
  EXPECT_FALSE(c.Done(T(0.02)));  // nothing written yet
  c.Observe(0, 800, T(0.05));
  EXPECT_FALSE(c.Done(T(0.1)));
  c.Observe(0, 900, T(0.1));  // still writing
  EXPECT_FALSE(c.Done(T(0.19)));
  c.Observe(0, 900, T(0.2));
  EXPECT_TRUE(c.Done(T(0.2)));
  const StackCollection::Result r = c.Results().at(0);
  EXPECT_TRUE(r.answered);
  EXPECT_EQ(r.offset, 500);
  EXPECT_EQ(r.length, 400);
  EXPECT_EQ(r.pid, 1000u);
}

TEST(StackCollectionTest, TheCollectionWaitsForEveryAskedRank) {
  StackCollection c(1, {Rank(0, 1, true, kSignal), Rank(1, 1, true, kSignal)});
  c.Asked(0, 0, true);
  c.Asked(1, 0, true);
  c.Observe(0, 300, T(0.01));
  c.Observe(1, 0, T(0.01));
  EXPECT_THAT(c.Pending(T(0.5)), ElementsAre(1u));
  EXPECT_FALSE(c.Done(T(1.5)));  // rank 1 may be stuck in C code: the time limit ends it
  const std::vector<StackCollection::Result> results = c.Results();
  EXPECT_TRUE(results[0].answered);
  EXPECT_FALSE(results[1].answered);
  EXPECT_EQ(results[1].length, 0);
}

TEST(StackCollectionTest, ARankThatCouldNotBeSignalledDoesNotHoldTheCollection) {
  StackCollection c(1, {Rank(0, 1, true, kSignal)});
  c.Asked(0, 0, false);
  EXPECT_TRUE(c.Done(T(0)));
  EXPECT_FALSE(c.Results().at(0).answered);
}

TEST(StackCollectionTest, AnAnswerStillBeingWrittenCountsWhenTheTimeIsUp) {
  StackCollection c(1, {Rank(0, 1, true, kSignal)});
  c.Asked(0, 0, true);
  c.Observe(0, 100, T(1.95));
  EXPECT_FALSE(c.Done(T(2)));
  EXPECT_TRUE(c.Results().at(0).answered);
}

TEST(StackCollectionTest, TheTextIsCapped) {
  StackCollection c(1, {Rank(0, 1, true, kSignal)});
  c.Asked(0, 10, true);
  c.Observe(0, 10 + kMaxStackBytes + 5000, T(0.01));
  const StackCollection::Result r = c.Results().at(0);
  EXPECT_EQ(r.offset, 10);
  EXPECT_EQ(r.length, kMaxStackBytes);
}

TEST(StackCollectionTest, AFileMadeAnewIsReadFromItsStart) {
  StackCollection c(1, {Rank(0, 1, true, kSignal)});
  c.Asked(0, 5000, true);
  c.Observe(0, 700, T(0.01));
  const StackCollection::Result r = c.Results().at(0);
  EXPECT_TRUE(r.answered);
  EXPECT_EQ(r.offset, 0);
  EXPECT_EQ(r.length, 700);
}

TEST(StackCollectionTest, ObservationsOfRanksNotAskedAreIgnored) {
  StackCollection c(1, {Rank(0, 1, true, 0)});
  c.Asked(0, 0, true);
  c.Observe(0, 100, T(0.01));
  c.Observe(7, 100, T(0.01));
  EXPECT_TRUE(c.Done(T(0.01)));
  EXPECT_FALSE(c.Results().at(0).answered);
}

TEST(StackTextTest, KeepsAsciiLinesAndReplacesOtherBytes) {
  EXPECT_EQ(StackText("Thread 0x1 (most recent call first):\n\tFile \"a.py\"\n"),
            "Thread 0x1 (most recent call first):\n\tFile \"a.py\"\n");
  EXPECT_EQ(StackText(std::string("a\xc3\xa9\0b\x7f", 6)), "a???b?");
}

// NCCL's flight recorder (docs/gpu.md): a rank asked through its pipe has
// answered once its dump file was written anew and stayed so; a rank whose
// pipe nobody reads (no NCCL group) is not waited for.
TEST(StackCollectionTest, AFlightRecorderDumpIsWaitedForOnlyFromARankThatReadsItsPipe) {
  StackCollection c(1, {Rank(0, 1, true, kSignal), Rank(1, 1, true, kSignal)});
  c.Asked(0, 0, true);
  c.Asked(1, 0, true);
  c.AskedDump(0, 111, true);
  c.AskedDump(1, 0, false);
  c.Observe(0, 10, T(0));
  c.Observe(1, 10, T(0));
  EXPECT_FALSE(c.Done(T(0.5)));  // stacks answered and quiet; rank 0's dump not yet written
  EXPECT_THAT(c.PendingDumps(T(0.5)), ElementsAre(0u));
  c.ObserveDump(0, 111, T(0.6));  // the old dump, unchanged: no answer
  EXPECT_FALSE(c.Done(T(0.7)));
  c.ObserveDump(0, 222, T(0.8));  // written anew
  EXPECT_FALSE(c.Done(T(0.85)));
  EXPECT_TRUE(c.Done(T(0.8) + kStackQuietTime));
  const std::vector<StackCollection::Result> results = c.Results();
  EXPECT_TRUE(results[0].dumped);
  EXPECT_FALSE(results[1].dumped);
}

}  // namespace
}  // namespace trainsup
