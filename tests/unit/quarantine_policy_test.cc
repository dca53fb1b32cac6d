// Which nodes the quarantine policy quarantines, and the fraction cap.
#include "daemon/core/quarantine_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time AtMin(int64_t minutes) { return kT0 + absl::Minutes(minutes); }

QuarantineOptions Options(int after = 3, double max_fraction = 0.25) {
  QuarantineOptions o;
  o.after = after;
  o.window = absl::Hours(1);
  o.max_fraction = max_fraction;
  return o;
}

constexpr size_t kManyNodes = 100;  // the cap is never in the way

TEST(QuarantinePolicyTest, FailuresBelowAfterDoNotQuarantine) {
  QuarantinePolicy p(Options(3));
  QuarantinePolicy::Verdict v1 = p.Attribute(AtMin(0), "n1", "crash of rank 0", kManyNodes);
  QuarantinePolicy::Verdict v2 = p.Attribute(AtMin(1), "n1", "crash of rank 1", kManyNodes);

  EXPECT_FALSE(v1.quarantine);
  EXPECT_EQ(v1.failures, 1);
  EXPECT_FALSE(v2.quarantine);
  EXPECT_FALSE(v2.skipped_by_cap);
  EXPECT_EQ(v2.failures, 2);
  EXPECT_FALSE(p.IsQuarantined("n1"));
  EXPECT_EQ(p.quarantined_count(), 0u);
}

TEST(QuarantinePolicyTest, AfterFailuresWithinTheWindowQuarantine) {
  QuarantinePolicy p(Options(3));
  p.Attribute(AtMin(0), "n1", "crash of rank 0", kManyNodes);
  p.Attribute(AtMin(20), "n1", "hang at rank 1", kManyNodes);
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(40), "n1", "crash of rank 2", kManyNodes);

  EXPECT_TRUE(v.quarantine);
  EXPECT_FALSE(v.skipped_by_cap);
  EXPECT_EQ(v.failures, 3);
  EXPECT_TRUE(p.IsQuarantined("n1"));
  EXPECT_EQ(p.quarantined_count(), 1u);
  EXPECT_EQ(p.ReasonOf("n1"), v.reason);
}

TEST(QuarantinePolicyTest, FailuresOfOtherNodesDoNotAddUp) {
  QuarantinePolicy p(Options(2));
  p.Attribute(AtMin(0), "n1", "crash", kManyNodes);
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(1), "n2", "crash", kManyNodes);
  EXPECT_FALSE(v.quarantine);
  EXPECT_EQ(v.failures, 1);
  EXPECT_FALSE(p.IsQuarantined("n1"));
  EXPECT_FALSE(p.IsQuarantined("n2"));
}

TEST(QuarantinePolicyTest, ReasonListsTheFailures) {
  QuarantinePolicy p(Options(2));
  p.Attribute(AtMin(0), "n1", "crash of rank 3 (exit code 1)", kManyNodes);
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(5), "n1", "hang at rank 2", kManyNodes);

  ASSERT_TRUE(v.quarantine);
  EXPECT_THAT(v.reason, HasSubstr("2 failures within 1h"));
  EXPECT_THAT(v.reason, HasSubstr("crash of rank 3 (exit code 1); hang at rank 2"));
}

TEST(QuarantinePolicyTest, FailuresOlderThanTheWindowDropOut) {
  QuarantinePolicy p(Options(3));
  p.Attribute(AtMin(0), "n1", "old", kManyNodes);
  p.Attribute(AtMin(30), "n1", "middle", kManyNodes);
  // At 60m the first failure is exactly the window's age: out.
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(60), "n1", "new", kManyNodes);

  EXPECT_FALSE(v.quarantine);
  EXPECT_EQ(v.failures, 2);
  EXPECT_FALSE(p.IsQuarantined("n1"));
}

TEST(QuarantinePolicyTest, FailureJustInsideTheWindowStillCounts) {
  QuarantinePolicy p(Options(3));
  p.Attribute(AtMin(0), "n1", "old", kManyNodes);
  p.Attribute(AtMin(30), "n1", "middle", kManyNodes);
  QuarantinePolicy::Verdict v =
      p.Attribute(AtMin(60) - absl::Nanoseconds(1), "n1", "new", kManyNodes);

  EXPECT_TRUE(v.quarantine);
  EXPECT_EQ(v.failures, 3);
}

TEST(QuarantinePolicyTest, ReasonNamesOnlyFailuresWithinTheWindow) {
  QuarantinePolicy p(Options(2));
  p.Attribute(AtMin(0), "n1", "ancient failure", kManyNodes);
  p.Attribute(AtMin(100), "n1", "recent one", kManyNodes);
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(110), "n1", "recent two", kManyNodes);

  ASSERT_TRUE(v.quarantine);
  EXPECT_THAT(v.reason, HasSubstr("recent one; recent two"));
  EXPECT_THAT(v.reason, ::testing::Not(HasSubstr("ancient")));
}

// Quarantines n1..n(count) by policy (after = 1) with `known` nodes.
void QualifyNodes(QuarantinePolicy& p, int count, size_t known) {
  for (int i = 1; i <= count; ++i) p.Attribute(AtMin(i), absl::StrCat("n", i), "crash", known);
}

TEST(QuarantinePolicyTest, CapAllowsAQuarterOfEightNodes) {
  QuarantinePolicy p(Options(1, 0.25));
  QuarantinePolicy::Verdict v1 = p.Attribute(AtMin(1), "n1", "crash", 8);
  QuarantinePolicy::Verdict v2 = p.Attribute(AtMin(2), "n2", "crash", 8);
  QuarantinePolicy::Verdict v3 = p.Attribute(AtMin(3), "n3", "crash", 8);

  EXPECT_TRUE(v1.quarantine);
  EXPECT_TRUE(v2.quarantine);
  EXPECT_FALSE(v3.quarantine);
  EXPECT_TRUE(v3.skipped_by_cap);
  EXPECT_EQ(v3.failures, 1);
  EXPECT_FALSE(v3.reason.empty());  // it qualified: the reason is given
  EXPECT_FALSE(p.IsQuarantined("n3"));
  EXPECT_EQ(p.quarantined_count(), 2u);
  EXPECT_EQ(p.skipped(), 1u);
}

TEST(QuarantinePolicyTest, SkippedCountsEveryRefusal) {
  QuarantinePolicy p(Options(1, 0.25));
  QualifyNodes(p, 5, 8);
  EXPECT_EQ(p.quarantined_count(), 2u);
  EXPECT_EQ(p.skipped(), 3u);
}

TEST(QuarantinePolicyTest, NodeBelowAfterIsNotSkippedByTheCap) {
  QuarantinePolicy p(Options(2, 0.25));
  QuarantinePolicy::Verdict v = p.Attribute(AtMin(1), "n1", "crash", 1);
  EXPECT_FALSE(v.skipped_by_cap);
  EXPECT_EQ(p.skipped(), 0u);
}

TEST(QuarantinePolicyTest, CapAlwaysAllowsOne) {
  QuarantinePolicy p(Options(1, 0.25));
  QuarantinePolicy::Verdict v1 = p.Attribute(AtMin(1), "n1", "crash", 2);
  QuarantinePolicy::Verdict v2 = p.Attribute(AtMin(2), "n2", "crash", 2);

  EXPECT_TRUE(v1.quarantine);  // floor(0.25 x 2) = 0, yet one is allowed
  EXPECT_FALSE(v2.quarantine);
  EXPECT_TRUE(v2.skipped_by_cap);
  EXPECT_EQ(p.quarantined_count(), 1u);
  EXPECT_EQ(p.skipped(), 1u);
}

TEST(QuarantinePolicyTest, CapFollowsTheKnownNodeCount) {
  QuarantinePolicy p(Options(1, 0.25));
  QualifyNodes(p, 2, 8);
  ASSERT_EQ(p.quarantined_count(), 2u);
  // The cluster grew to 12 nodes: a third is allowed.
  EXPECT_TRUE(p.Attribute(AtMin(10), "n3", "crash", 12).quarantine);
  EXPECT_TRUE(p.Attribute(AtMin(11), "n4", "crash", 12).skipped_by_cap);
}

TEST(QuarantinePolicyTest, OperatorQuarantineIsNotCapped) {
  QuarantinePolicy p(Options(1, 0.25));
  for (int i = 1; i <= 5; ++i) p.Quarantine(absl::StrCat("op", i), "operator says so");
  EXPECT_EQ(p.quarantined_count(), 5u);
  EXPECT_EQ(p.skipped(), 0u);
  EXPECT_EQ(p.ReasonOf("op3"), "operator says so");
}

TEST(QuarantinePolicyTest, OperatorQuarantinesCountTowardsThePolicyCap) {
  QuarantinePolicy p(Options(1, 0.25));
  p.Quarantine("op1", "operator");
  p.Quarantine("op2", "operator");

  QuarantinePolicy::Verdict v = p.Attribute(AtMin(1), "n1", "crash", 8);

  EXPECT_FALSE(v.quarantine);
  EXPECT_TRUE(v.skipped_by_cap);
  EXPECT_EQ(p.skipped(), 1u);
}

TEST(QuarantinePolicyTest, UnquarantineFreesACapSlot) {
  QuarantinePolicy p(Options(1, 0.25));
  QualifyNodes(p, 3, 8);
  ASSERT_FALSE(p.IsQuarantined("n3"));
  p.Unquarantine("n1");
  EXPECT_TRUE(p.Attribute(AtMin(10), "n3", "crash", 8).quarantine);
}

TEST(QuarantinePolicyTest, AlreadyQuarantinedNodeIsNotQuarantinedAgainNorSkipped) {
  QuarantinePolicy p(Options(1, 0.25));
  ASSERT_TRUE(p.Attribute(AtMin(1), "n1", "crash", 8).quarantine);
  const std::string reason = p.ReasonOf("n1");

  QuarantinePolicy::Verdict v = p.Attribute(AtMin(2), "n1", "another crash", 8);

  EXPECT_FALSE(v.quarantine);
  EXPECT_FALSE(v.skipped_by_cap);
  EXPECT_EQ(v.failures, 2);
  EXPECT_EQ(p.ReasonOf("n1"), reason);
  EXPECT_EQ(p.skipped(), 0u);
}

TEST(QuarantinePolicyTest, UnquarantineForgetsTheNodesFailures) {
  QuarantinePolicy p(Options(2));
  p.Attribute(AtMin(0), "n1", "crash", kManyNodes);
  ASSERT_TRUE(p.Attribute(AtMin(1), "n1", "crash", kManyNodes).quarantine);

  p.Unquarantine("n1");
  EXPECT_FALSE(p.IsQuarantined("n1"));
  EXPECT_EQ(p.ReasonOf("n1"), "");
  EXPECT_EQ(p.quarantined_count(), 0u);

  QuarantinePolicy::Verdict v = p.Attribute(AtMin(2), "n1", "crash", kManyNodes);
  EXPECT_FALSE(v.quarantine);
  EXPECT_EQ(v.failures, 1);
  EXPECT_FALSE(p.IsQuarantined("n1"));
  // ... but a fresh series does quarantine it again.
  EXPECT_TRUE(p.Attribute(AtMin(3), "n1", "crash", kManyNodes).quarantine);
}

TEST(QuarantinePolicyTest, UnquarantineOfAnUnknownNodeIsHarmless) {
  QuarantinePolicy p(Options());
  p.Unquarantine("nobody");
  EXPECT_FALSE(p.IsQuarantined("nobody"));
  EXPECT_EQ(p.ReasonOf("nobody"), "");
  EXPECT_EQ(p.quarantined_count(), 0u);
}

TEST(QuarantinePolicyTest, RememberDecidesNothingNow) {
  QuarantinePolicy p(Options(2));
  p.Remember(AtMin(0), "n1", "restored one");
  p.Remember(AtMin(1), "n1", "restored two");
  p.Remember(AtMin(2), "n1", "restored three");
  EXPECT_FALSE(p.IsQuarantined("n1"));
  EXPECT_EQ(p.quarantined_count(), 0u);
}

TEST(QuarantinePolicyTest, RememberedFailuresCountTowardsALaterVerdict) {
  QuarantinePolicy p(Options(3));
  // Restored out of order.
  p.Remember(AtMin(20), "n1", "restored later");
  p.Remember(AtMin(10), "n1", "restored earlier");

  QuarantinePolicy::Verdict v = p.Attribute(AtMin(30), "n1", "live", kManyNodes);

  EXPECT_TRUE(v.quarantine);
  EXPECT_EQ(v.failures, 3);
  EXPECT_THAT(v.reason, HasSubstr("restored earlier; restored later; live"));
}

TEST(QuarantinePolicyTest, RememberedFailuresLeaveTheWindowLikeOthers) {
  QuarantinePolicy p(Options(3));
  p.Remember(AtMin(0), "n1", "restored old");
  p.Remember(AtMin(50), "n1", "restored recent");

  QuarantinePolicy::Verdict v = p.Attribute(AtMin(70), "n1", "live", kManyNodes);

  EXPECT_FALSE(v.quarantine);
  EXPECT_EQ(v.failures, 2);
}

}  // namespace
}  // namespace trainsup
