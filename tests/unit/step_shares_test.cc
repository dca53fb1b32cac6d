#include "daemon/core/step_shares.h"

#include <cmath>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

TEST(StepSharesTest, EmptyUntilAMeasuredStep) {
  StepShares s;
  EXPECT_TRUE(s.empty());
  s.Add(0, 0.5, 0.1);  // the helper's first step: no duration
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.data_wait_share(), 0);
  EXPECT_FALSE(s.comm_share());
}

TEST(StepSharesTest, SharesOfSteadyStepsAreExact) {
  StepShares s;
  for (int i = 0; i < 20; ++i) s.Add(1.0, 0.25, 0.5);
  EXPECT_NEAR(s.data_wait_share(), 0.25, 1e-5);
  EXPECT_NEAR(*s.comm_share(), 0.25, 1e-5);
  EXPECT_NEAR(*s.comm_share_trend(), 0, 1e-5);
}

TEST(StepSharesTest, WeightedByStepTime) {
  StepShares s;
  s.Add(1.0, 0.0, std::nullopt);
  s.Add(3.0, 3.0, std::nullopt);  // 3 of 3.9 decayed seconds
  EXPECT_NEAR(s.data_wait_share(), 3.0 / 3.9, 1e-5);
  EXPECT_FALSE(s.comm_share()) << "no step carried a compute time";
}

TEST(StepSharesTest, ASlowerLoaderShowsWithinAFewSteps) {
  StepShares s;
  for (int i = 0; i < 100; ++i) s.Add(0.1, 0.0, 0.09);
  int steps = 0;
  while (s.data_wait_share() < 0.2) {
    s.Add(0.2, 0.1, 0.09);  // the loader now takes 0.1 s of each 0.2 s step
    ++steps;
  }
  EXPECT_LE(steps, 3);
  for (int i = 0; i < 60; ++i) s.Add(0.2, 0.1, 0.09);
  EXPECT_NEAR(s.data_wait_share(), 0.5, 0.01);
}

TEST(StepSharesTest, RisingCommunicationHasAPositiveTrend) {
  StepShares s;
  for (int i = 0; i < 300; ++i) s.Add(1.0, 0.0, 0.9);  // 10 % outside compute
  for (int i = 0; i < 20; ++i) s.Add(1.0, 0.0, 0.6);   // now 40 %
  // The long share has moved a fifth of the way; the recent one most of it.
  EXPECT_NEAR(*s.comm_share(), 0.1 + 0.3 * (1 - std::pow(0.99, 20)), 0.01);
  EXPECT_NEAR(*s.comm_share() + *s.comm_share_trend(), 0.4, 0.05);

  // A few slow steps barely move the steady share.
  StepShares steady;
  for (int i = 0; i < 300; ++i) steady.Add(1.0, 0.0, 0.9);
  for (int i = 0; i < 3; ++i) steady.Add(1.0, 0.0, 0.1);
  EXPECT_LT(*steady.comm_share(), 0.13);
}

TEST(StepSharesTest, PartsAreClampedToTheStep) {
  StepShares s;
  s.Add(1.0, 2.0, 0.5);  // a data wait longer than the step
  EXPECT_DOUBLE_EQ(s.data_wait_share(), 1.0);
  EXPECT_DOUBLE_EQ(*s.comm_share(), 0.0);
}

}  // namespace
}  // namespace trainsup
