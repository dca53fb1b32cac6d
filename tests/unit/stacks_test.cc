// Grouping the Python stacks of a hung job's ranks.
#include "daemon/core/stacks.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;

// What faulthandler writes for a rank with a helper thread and a main
// thread blocked in `where`.
std::string Dump(const std::string& thread_id, const std::string& where) {
  return "Thread 0x00007f" + thread_id + "aa (most recent call first):\n"
         "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
         "\n"
         "Current thread 0x00007f" + thread_id + "bb (most recent call first):\n"
         "  File \"/job/train.py\", line " + where + "\n"
         "  File \"/job/train.py\", line 200 in main\n";
}

TEST(StackSignatureTest, IsTheMainThreadsFramesWithThreadIdsBlanked) {
  EXPECT_EQ(StackSignature(Dump("11", "120 in all_reduce")),
            "File \"/job/train.py\", line 120 in all_reduce\n"
            "File \"/job/train.py\", line 200 in main\n");
  EXPECT_EQ(StackSignature(Dump("11", "120 in all_reduce")),
            StackSignature(Dump("22", "120 in all_reduce")));
  EXPECT_NE(StackSignature(Dump("11", "120 in all_reduce")),
            StackSignature(Dump("11", "95 in compute")));
}

TEST(GroupStacksTest, SmallestGroupFirstWithTheCulpritMarked) {
  JobStacks s;
  s.culprit = 2;
  for (uint32_t r : {0u, 1u, 3u}) {
    s.by_rank[r] = {r < 2 ? "node-a" : "node-b", true, Dump(std::to_string(r), "120 in all_reduce")};
  }
  s.by_rank[2] = {"node-b", true, Dump("2", "95 in compute")};

  std::vector<StackGroup> groups = GroupStacks(s);

  ASSERT_EQ(groups.size(), 2u);
  EXPECT_THAT(groups[0].ranks, ElementsAre(2));
  EXPECT_THAT(groups[0].nodes, ElementsAre("node-b"));
  EXPECT_TRUE(groups[0].culprit);
  EXPECT_THAT(groups[0].stack, ::testing::HasSubstr("in compute"));
  EXPECT_THAT(groups[1].ranks, ElementsAre(0, 1, 3));
  EXPECT_THAT(groups[1].nodes, ElementsAre("node-a", "node-a", "node-b"));
  EXPECT_FALSE(groups[1].culprit);
}

TEST(GroupStacksTest, RanksThatDidNotAnswerAreListedApart) {
  JobStacks s;
  s.by_rank[0] = {"node-a", true, Dump("0", "120 in all_reduce")};
  s.by_rank[1] = {"node-a", false, ""};
  EXPECT_EQ(GroupStacks(s).size(), 1u);
  EXPECT_THAT(UnansweredRanks(s), ElementsAre(1));
}

}  // namespace
}  // namespace trainsup
