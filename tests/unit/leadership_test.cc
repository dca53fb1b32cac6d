// Leadership: when an elected trainsupd may act (daemon/ha/leadership.h).
// Times are values; no clock, no etcd.
#include "daemon/ha/leadership.h"
#include "tests/support/test_time.h"

#include <gtest/gtest.h>

namespace trainsup {
namespace {

using Role = Leadership::Role;

using ::trainsup::testing::AtS;

class LeadershipTest : public ::testing::Test {
 protected:
  // TTL 5s, margin 0.5s; the lease granted at 0 and the election won at 0.1.
  void Elect() {
    l_.NewLease(AtS(0), absl::Seconds(5));
    l_.Elected(AtS(0.1), 42);
  }
  Leadership l_{absl::Milliseconds(500)};
};

TEST_F(LeadershipTest, AStandbyNeverActs) {
  EXPECT_EQ(l_.Update(AtS(0)), Role::kStandby);
  l_.NewLease(AtS(0), absl::Seconds(5));
  EXPECT_EQ(l_.Update(AtS(1)), Role::kStandby);
  EXPECT_EQ(l_.epoch(), 0);
}

TEST_F(LeadershipTest, TheWinnerLeadsWithItsKeysRevisionAsEpoch) {
  Elect();
  EXPECT_EQ(l_.Update(AtS(0.2)), Role::kLeader);
  EXPECT_EQ(l_.epoch(), 42);
}

TEST_F(LeadershipTest, RenewalsEveryThirdOfTheTtlKeepItLeading) {
  Elect();
  for (double t = 1.6; t < 60; t += 5.0 / 3) {
    l_.Renewed(AtS(t), absl::Seconds(5));
    EXPECT_EQ(l_.Update(AtS(t + 1.6)), Role::kLeader) << t;
  }
}

TEST_F(LeadershipTest, WithoutRenewalItStopsActingAMarginBeforeTheLeaseCouldExpire) {
  Elect();
  l_.Renewed(AtS(2), absl::Seconds(5));  // sent at 2: etcd keeps it until 7 at least
  EXPECT_EQ(l_.Update(AtS(6.49)), Role::kLeader);
  EXPECT_EQ(l_.Update(AtS(6.5)), Role::kSuspended);
  EXPECT_EQ(l_.lease_valid_until(), AtS(6.5));
  EXPECT_EQ(l_.epoch(), 42);  // still elected, not acting
}

TEST_F(LeadershipTest, TheDeadlineRunsFromWhenTheRenewalWasSentNotAnswered) {
  Elect();
  // Sent at 2, answered (slowly) at 4: the lease may run from 2.
  l_.Renewed(AtS(2), absl::Seconds(5));
  EXPECT_EQ(l_.Update(AtS(6.5)), Role::kSuspended);
}

TEST_F(LeadershipTest, AnAnswerOlderThanTheNewestRenewalDoesNotMoveTheDeadlineBack) {
  Elect();
  l_.Renewed(AtS(3), absl::Seconds(5));
  l_.Renewed(AtS(2), absl::Seconds(5));  // a late answer to an older keepalive
  EXPECT_EQ(l_.lease_valid_until(), AtS(7.5));
}

TEST_F(LeadershipTest, ASuspendedLeaderActsAgainOnlyAfterARenewalAndAVerification) {
  Elect();
  EXPECT_EQ(l_.Update(AtS(4.5)), Role::kSuspended);
  EXPECT_FALSE(l_.NeedsVerification());  // not renewed since
  l_.Renewed(AtS(8), absl::Seconds(5));  // the quorum is back; the lease survived
  EXPECT_EQ(l_.Update(AtS(8.1)), Role::kSuspended);  // a renewal alone is not enough
  EXPECT_TRUE(l_.NeedsVerification());
  l_.Verified(AtS(8.2), true);
  EXPECT_EQ(l_.Update(AtS(8.3)), Role::kLeader);
  EXPECT_EQ(l_.epoch(), 42);
}

TEST_F(LeadershipTest, AVerificationThatAnotherLeadsLosesTheElection) {
  Elect();
  l_.Update(AtS(4.5));
  l_.Renewed(AtS(8), absl::Seconds(5));
  l_.Verified(AtS(8.2), false);
  EXPECT_EQ(l_.Update(AtS(8.3)), Role::kStandby);
  EXPECT_EQ(l_.epoch(), 0);
}

TEST_F(LeadershipTest, AVerificationAskedBeforeTheSuspensionDoesNotLiftIt) {
  Elect();
  l_.Renewed(AtS(1), absl::Seconds(5));
  l_.Update(AtS(5.6));  // suspended at 5.6
  l_.Renewed(AtS(6), absl::Seconds(5));
  l_.Verified(AtS(5.5), true);  // asked before the suspension
  EXPECT_EQ(l_.Update(AtS(6.1)), Role::kSuspended);
}

TEST_F(LeadershipTest, ANewLeaseForgetsTheElectionWonOnTheOldOne) {
  Elect();
  l_.Lost();
  EXPECT_EQ(l_.Update(AtS(1)), Role::kStandby);
  l_.NewLease(AtS(2), absl::Seconds(5));
  EXPECT_EQ(l_.Update(AtS(2.1)), Role::kStandby);
  EXPECT_EQ(l_.epoch(), 0);
}

TEST(RoleNameTest, NamesEachRole) {
  EXPECT_STREQ(RoleName(Role::kStandby), "standby");
  EXPECT_STREQ(RoleName(Role::kLeader), "leader");
  EXPECT_STREQ(RoleName(Role::kSuspended), "suspended");
}

}  // namespace
}  // namespace trainsup
