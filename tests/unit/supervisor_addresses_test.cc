#include "common/supervisor_addresses.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SupervisorAddressesTest, ParsesAListAndStartsAtItsFirst) {
  absl::StatusOr<SupervisorAddresses> a = SupervisorAddresses::Parse(" h1:7411, h2:7411 ,");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->list(), ElementsAre("h1:7411", "h2:7411"));
  EXPECT_EQ(a->current(), "h1:7411");
  EXPECT_EQ(a->Joined(), "h1:7411,h2:7411");
}

TEST(SupervisorAddressesTest, RefusesAnEmptyListAndABadAddress) {
  EXPECT_FALSE(SupervisorAddresses::Parse("").ok());
  EXPECT_FALSE(SupervisorAddresses::Parse(" , ").ok());
  absl::StatusOr<SupervisorAddresses> bad = SupervisorAddresses::Parse("h1:7411,h2");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("h2"));
}

TEST(SupervisorAddressesTest, WithoutANamedLeaderGoesRoundTheList) {
  SupervisorAddresses a = *SupervisorAddresses::Parse("a:1,b:2,c:3");
  EXPECT_EQ(a.Next(""), "b:2");
  EXPECT_EQ(a.Next(""), "c:3");
  EXPECT_EQ(a.Next(""), "a:1");
}

TEST(SupervisorAddressesTest, OneAddressStaysThatAddress) {
  SupervisorAddresses a = *SupervisorAddresses::Parse("a:1");
  EXPECT_EQ(a.Next(""), "a:1");
  EXPECT_EQ(a.Next("a:1"), "a:1");
}

TEST(SupervisorAddressesTest, FollowsTheLeaderAStandbyNames) {
  SupervisorAddresses a = *SupervisorAddresses::Parse("a:1,b:2,c:3");
  EXPECT_EQ(a.Next("c:3"), "c:3");
  // c failed too, naming no one: the list goes on after c.
  EXPECT_EQ(a.Next(""), "a:1");
}

TEST(SupervisorAddressesTest, FollowsALeaderOutsideTheListThenReturnsToIt) {
  SupervisorAddresses a = *SupervisorAddresses::Parse("a:1,b:2");
  EXPECT_EQ(a.Next("z:9"), "z:9");
  EXPECT_EQ(a.Next(""), "b:2");
}

TEST(SupervisorAddressesTest, IgnoresAnUnusableOrStaleLeader) {
  SupervisorAddresses a = *SupervisorAddresses::Parse("a:1,b:2");
  EXPECT_EQ(a.Next("0.0.0.0:2"), "b:2");  // a wildcard bind: not dialable
  EXPECT_EQ(a.Next("[::]:2"), "a:1");
  EXPECT_EQ(a.Next("a:1"), "b:2");        // names the address that just failed
  EXPECT_EQ(a.Next("garbage"), "a:1");
}

}  // namespace
}  // namespace trainsup
