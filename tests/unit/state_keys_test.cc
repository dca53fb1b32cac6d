// The shared state's keys in etcd and their values (daemon/ha/state_keys.h).
#include "daemon/ha/state_keys.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"

namespace trainsup {
namespace {

TEST(StateKeysTest, LogKeysSortBySeqAndParseBack) {
  const StateKeys keys("/trainsup/default/");
  EXPECT_EQ(keys.Log(7), "/trainsup/default/log/00000000000000000007");
  EXPECT_LT(keys.Log(9), keys.Log(10));  // etcd ranges sort bytewise
  EXPECT_LT(keys.Log(10), PrefixEnd(keys.LogPrefix()));
  EXPECT_EQ(keys.LogSeq(keys.Log(18446744073709551615u)), 18446744073709551615u);
  EXPECT_EQ(keys.LogSeq("/trainsup/default/log/7"), std::nullopt);
  EXPECT_EQ(keys.LogSeq("/trainsup/other/log/00000000000000000007"), std::nullopt);
  EXPECT_EQ(keys.LogSeq(keys.Part("part", 7, 0)), std::nullopt);
}

TEST(StateKeysTest, PartsOfOneSeqShareAPrefixOfTheirOwn) {
  const StateKeys keys("/trainsup/s1/");
  EXPECT_EQ(keys.Part("snap", 12, 3), "/trainsup/s1/snap/00000000000000000012/000003");
  const std::string prefix = keys.PartsPrefix("snap", 12);
  EXPECT_EQ(keys.Part("snap", 12, 3).rfind(prefix, 0), 0u);
  // Older snapshots sort before a newer one's parts: one range deletes them.
  EXPECT_LT(keys.Part("snap", 11, 999999), prefix);
  EXPECT_LT(keys.KindPrefix("snap"), prefix);
  EXPECT_EQ(keys.Head(), "/trainsup/s1/snapshot");
}

TEST(StateKeysTest, PrefixEndIsTheFirstKeyPastThePrefix) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd("a\xff"), "b");
  EXPECT_EQ(PrefixEnd(""), std::string(1, '\0'));
}

TEST(StateKeysTest, SplitPartsCoversTheBlobInOrder) {
  EXPECT_EQ(absl::StrJoin(SplitParts("abcdefg", 3), "|"), "abc|def|g");
  EXPECT_EQ(absl::StrJoin(SplitParts("abcdef", 3), "|"), "abc|def");
  EXPECT_EQ(SplitParts("", 3).size(), 1u);
  EXPECT_EQ(SplitParts("ab", 3).size(), 1u);
}

TEST(StateKeysTest, LogEntriesAreChangesOrACountOfParts) {
  const std::string binary("\0P3\xff", 4);
  absl::StatusOr<LogEntry> inline_entry = ParseLogEntry(InlineEntry(binary));
  ASSERT_TRUE(inline_entry.ok());
  EXPECT_EQ(inline_entry->changes, binary);
  absl::StatusOr<LogEntry> parts = ParseLogEntry(PartsEntry(3));
  ASSERT_TRUE(parts.ok());
  EXPECT_FALSE(parts->changes.has_value());
  EXPECT_EQ(parts->parts, 3u);
  EXPECT_EQ(ParseLogEntry("").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseLogEntry("P0").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseLogEntry("Px").status().code(), absl::StatusCode::kDataLoss);
}

TEST(StateKeysTest, SnapshotHeadRoundTrips) {
  absl::StatusOr<SnapshotHead> head = ParseHead(HeadValue({41, 2}));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->seq, 41u);
  EXPECT_EQ(head->parts, 2u);
  EXPECT_FALSE(ParseHead("41").ok());
  EXPECT_FALSE(ParseHead("x 2").ok());
}

TEST(StateKeysTest, CompactionIsDueByEntriesOrBytes) {
  const CompactionPolicy policy{10, 1000};
  EXPECT_FALSE(ShouldCompact(policy, 9, 999));
  EXPECT_TRUE(ShouldCompact(policy, 10, 0));
  EXPECT_TRUE(ShouldCompact(policy, 1, 1000));
}

}  // namespace
}  // namespace trainsup
