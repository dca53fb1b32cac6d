#include "daemon/core/mtbf_estimator.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

constexpr double kHour = 3600;

MtbfOptions Options(double prior_seconds, double confidence) {
  MtbfOptions options;
  options.prior_seconds = prior_seconds;
  options.confidence = confidence;
  return options;
}

// Relative closeness.
::testing::AssertionResult Near(double actual, double expected, double relative) {
  if (std::abs(actual - expected) <= relative * std::abs(expected)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << actual << " is not within " << relative << " (relative) of " << expected;
}

TEST(ChiSquareTest, QuantilesMatchTables) {
  // Table values are printed to 3 decimals, so compare to their precision.
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.95, 2), 5.991, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.05, 2), 0.1026, 5e-5);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.95, 10), 18.307, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.05, 10), 3.940, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.9, 4), 7.779, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.1, 4), 1.064, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.99, 20), 37.566, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.01, 20), 8.260, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.975, 100), 129.561, 5e-4);
  EXPECT_NEAR(ChiSquareQuantileEvenDof(0.025, 100), 74.222, 5e-4);
}

TEST(ChiSquareTest, TwoDegreesOfFreedomIsExponential) {
  // F(x; 2) = 1 - e^{-x/2}, so the quantile is -2 ln(1 - p): exact to 1e-9.
  for (double p : {1e-9, 1e-4, 0.01, 0.1, 0.5, 0.9, 0.999, 0.999999}) {
    EXPECT_TRUE(Near(ChiSquareQuantileEvenDof(p, 2), -2 * std::log1p(-p), 1e-9)) << p;
  }
}

TEST(ChiSquareTest, CdfInvertsTheQuantile) {
  for (int dof : {2, 4, 10, 50, 400, 20000}) {
    for (double p : {0.001, 0.1, 0.5, 0.9, 0.999}) {
      const double x = ChiSquareQuantileEvenDof(p, dof);
      EXPECT_NEAR(ChiSquareCdfEvenDof(x, dof), p, 1e-9) << dof << " " << p;
    }
  }
}

TEST(ChiSquareTest, LargeDegreesOfFreedomAgreeWithWilsonHilferty) {
  // Median of chi-square(k) ~ k (1 - 2/(9k))^3 for large k.
  for (int dof : {2000, 200000}) {
    const double k = dof;
    EXPECT_TRUE(Near(ChiSquareQuantileEvenDof(0.5, dof), k * std::pow(1 - 2 / (9 * k), 3), 1e-5))
        << dof;
  }
}

TEST(ChiSquareTest, CdfEdgesAndBadArguments) {
  EXPECT_EQ(ChiSquareCdfEvenDof(0, 4), 0);
  EXPECT_EQ(ChiSquareCdfEvenDof(-1, 4), 0);
  EXPECT_EQ(ChiSquareCdfEvenDof(std::numeric_limits<double>::infinity(), 4), 1);
  EXPECT_NEAR(ChiSquareCdfEvenDof(2, 2), 1 - std::exp(-1.0), 1e-15);
  // F(x; 4) = 1 - e^{-x/2} (1 + x/2).
  EXPECT_NEAR(ChiSquareCdfEvenDof(3, 4), 1 - std::exp(-1.5) * 2.5, 1e-15);
  EXPECT_TRUE(std::isnan(ChiSquareCdfEvenDof(1, 3)));
  EXPECT_TRUE(std::isnan(ChiSquareCdfEvenDof(1, 0)));
  EXPECT_TRUE(std::isnan(ChiSquareQuantileEvenDof(0, 2)));
  EXPECT_TRUE(std::isnan(ChiSquareQuantileEvenDof(1, 2)));
  EXPECT_TRUE(std::isnan(ChiSquareQuantileEvenDof(0.5, 5)));
  EXPECT_TRUE(std::isnan(ChiSquareQuantileEvenDof(std::nan(""), 2)));
}

TEST(MtbfEstimatorTest, NoFailuresGivesThePriorDrivenFiniteValue) {
  MtbfEstimator estimator(MtbfOptions{});
  EXPECT_EQ(estimator.options().prior_seconds, 24 * kHour);
  EXPECT_EQ(estimator.options().confidence, 0.8);

  MtbfEstimate e = estimator.Estimate(0, 0);
  EXPECT_EQ(e.mtbf_seconds, 24 * kHour);
  EXPECT_EQ(e.pseudo_failures, 1);
  EXPECT_EQ(e.pseudo_exposure_seconds, 24 * kHour);
  // lower = 2T'/chi2(0.9; 4), upper = 2T'/chi2(0.1; 2) = 2T' / (-2 ln 0.9).
  EXPECT_TRUE(Near(e.lower_seconds, 2 * 86400 / 7.7794, 1e-4));
  EXPECT_TRUE(Near(e.upper_seconds, 2 * 86400 / (-2 * std::log(0.9)), 1e-9));
  EXPECT_TRUE(std::isfinite(e.upper_seconds));
  EXPECT_EQ(e.conservative_seconds, e.lower_seconds);

  e = estimator.Estimate(100 * kHour, 0);
  EXPECT_EQ(e.mtbf_seconds, 124 * kHour);
  EXPECT_TRUE(std::isfinite(e.upper_seconds));
  EXPECT_LT(e.lower_seconds, e.mtbf_seconds);
  EXPECT_GT(e.upper_seconds, e.mtbf_seconds);
}

TEST(MtbfEstimatorTest, OneFailure) {
  MtbfEstimator estimator(MtbfOptions{});
  MtbfEstimate e = estimator.Estimate(48 * kHour, 1);
  EXPECT_EQ(e.failures, 1);
  EXPECT_EQ(e.exposure_seconds, 48 * kHour);
  EXPECT_EQ(e.pseudo_failures, 2);
  EXPECT_DOUBLE_EQ(e.mtbf_seconds, (48 + 24) * kHour / 2);
  const double t2 = 2 * 72 * kHour;
  EXPECT_TRUE(Near(e.lower_seconds, t2 / ChiSquareQuantileEvenDof(0.9, 6), 1e-12));
  EXPECT_TRUE(Near(e.upper_seconds, t2 / ChiSquareQuantileEvenDof(0.1, 4), 1e-12));
  EXPECT_TRUE(Near(e.lower_seconds, t2 / 10.645, 1e-4));
  EXPECT_TRUE(Near(e.upper_seconds, t2 / 1.064, 1e-3));
}

TEST(MtbfEstimatorTest, ManyFailuresApproachTheRawRatioAndNarrow) {
  MtbfEstimator estimator(MtbfOptions{});
  MtbfEstimate many = estimator.Estimate(1e7, 1000);
  EXPECT_TRUE(Near(many.mtbf_seconds, 1e7 / 1000, 0.01));
  EXPECT_LT(many.lower_seconds, many.mtbf_seconds);
  EXPECT_GT(many.upper_seconds, many.mtbf_seconds);

  MtbfEstimate few = estimator.Estimate(1e5, 10);
  const double few_width = (few.upper_seconds - few.lower_seconds) / few.mtbf_seconds;
  const double many_width = (many.upper_seconds - many.lower_seconds) / many.mtbf_seconds;
  EXPECT_LT(many_width, few_width / 4);
  EXPECT_LT(many_width, 0.1);  // about +-2.56 / sqrt(1000) around the estimate
}

TEST(MtbfEstimatorTest, MoreFailuresInTheSameExposureLowerTheEstimate) {
  MtbfEstimator estimator(MtbfOptions{});
  MtbfEstimate previous = estimator.Estimate(1000 * kHour, 0);
  for (int r = 1; r <= 200; ++r) {
    MtbfEstimate e = estimator.Estimate(1000 * kHour, r);
    EXPECT_LT(e.mtbf_seconds, previous.mtbf_seconds) << r;
    EXPECT_LT(e.lower_seconds, previous.lower_seconds) << r;
    EXPECT_LT(e.upper_seconds, previous.upper_seconds) << r;
    EXPECT_LT(e.lower_seconds, e.mtbf_seconds) << r;
    EXPECT_GT(e.upper_seconds, e.mtbf_seconds) << r;
    previous = e;
  }
}

TEST(MtbfEstimatorTest, MoreExposureWithTheSameFailuresRaisesTheEstimate) {
  MtbfEstimator estimator(MtbfOptions{});
  EXPECT_LT(estimator.Estimate(10 * kHour, 3).mtbf_seconds,
            estimator.Estimate(20 * kHour, 3).mtbf_seconds);
}

TEST(MtbfEstimatorTest, PriorAndConfidenceAreSettable) {
  MtbfEstimator short_prior(Options(kHour, 0.8));
  EXPECT_EQ(short_prior.Estimate(0, 0).mtbf_seconds, kHour);

  MtbfEstimator wide(Options(24 * kHour, 0.95));
  MtbfEstimator narrow(Options(24 * kHour, 0.5));
  MtbfEstimate w = wide.Estimate(100 * kHour, 5);
  MtbfEstimate n = narrow.Estimate(100 * kHour, 5);
  EXPECT_EQ(w.mtbf_seconds, n.mtbf_seconds);
  EXPECT_LT(w.lower_seconds, n.lower_seconds);
  EXPECT_GT(w.upper_seconds, n.upper_seconds);
  EXPECT_EQ(w.confidence, 0.95);
}

TEST(MtbfEstimatorTest, NegativeOrNonFiniteInputsCountAsZero) {
  MtbfEstimator estimator(MtbfOptions{});
  MtbfEstimate zero = estimator.Estimate(0, 0);
  for (double exposure : {-5.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    MtbfEstimate e = estimator.Estimate(exposure, -3);
    EXPECT_EQ(e.exposure_seconds, 0);
    EXPECT_EQ(e.failures, 0);
    EXPECT_EQ(e.mtbf_seconds, zero.mtbf_seconds);
  }
}

}  // namespace
}  // namespace trainsup
