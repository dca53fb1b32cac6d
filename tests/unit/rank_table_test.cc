// RankTable: memory for the ranks heard of, lookups by rank, iteration in
// rank order whatever the arrival order.
#include "daemon/core/rank_table.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace trainsup {
namespace {

std::vector<uint32_t> Order(const RankTable<std::string>& table) {
  std::vector<uint32_t> ranks;
  for (const auto& [rank, value] : table) ranks.push_back(rank);
  return ranks;
}

TEST(RankTableTest, EmptyFindsNothing) {
  RankTable<std::string> table;
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(table.Find(0), nullptr);
  EXPECT_EQ(table.begin(), table.end());
}

TEST(RankTableTest, IteratesInRankOrderWhateverTheArrival) {
  RankTable<std::string> table;
  for (uint32_t rank : {1048575u, 7u, 300u, 0u, 256u, 255u, 70000u}) {
    table.FindOrAdd(rank, std::to_string(rank));
  }
  EXPECT_EQ(Order(table), (std::vector<uint32_t>{0, 7, 255, 256, 300, 70000, 1048575}));
  EXPECT_EQ(table.size(), 7u);
  EXPECT_EQ(table.begin()->first, 0u);
}

TEST(RankTableTest, FindOrAddMakesOnceThenFinds) {
  RankTable<std::string> table;
  std::string& first = table.FindOrAdd(42, "made");
  first += " and changed";
  EXPECT_EQ(table.FindOrAdd(42, "ignored"), "made and changed");
  ASSERT_NE(table.Find(42), nullptr);
  EXPECT_EQ(*table.Find(42), "made and changed");
  EXPECT_EQ(table.Find(43), nullptr);
}

TEST(RankTableTest, ReferencesStayValidWhileOthersAreAdded) {
  RankTable<std::string> table;
  std::string* first = &table.FindOrAdd(5, "five");
  for (uint32_t rank = 1000; rank < 20000; ++rank) table.FindOrAdd(rank, "x");
  EXPECT_EQ(first, table.Find(5));
  EXPECT_EQ(*first, "five");
}

TEST(RankTableTest, ClearForgetsEverything) {
  RankTable<std::string> table;
  table.FindOrAdd(3, "three");
  table.clear();
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(table.Find(3), nullptr);
  EXPECT_TRUE(Order(table).empty());
}

TEST(RankTableTest, MutableIterationChangesTheStates) {
  RankTable<std::string> table;
  table.FindOrAdd(2, "b");
  table.FindOrAdd(1, "a");
  for (auto& [rank, value] : table) value += "!";
  EXPECT_EQ(*table.Find(1), "a!");
  EXPECT_EQ(*table.Find(2), "b!");
}

}  // namespace
}  // namespace trainsup
