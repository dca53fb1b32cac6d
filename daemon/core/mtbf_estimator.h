#ifndef TRAINSUP_DAEMON_CORE_MTBF_ESTIMATOR_H_
#define TRAINSUP_DAEMON_CORE_MTBF_ESTIMATOR_H_

#include <cstdint>


namespace trainsup {

struct MtbfOptions {
  // The prior counts as one pseudo-failure over `prior_seconds` of exposure,
  // so a cluster that has not failed yet is never told its MTBF is infinite.
  // > 0. Default: 24h (86400 s).
  double prior_seconds = 24 * 3600;
  // Two-sided confidence of the interval, in (0, 1). Default: 0.8 (the 10th
  // and 90th percentiles).
  double confidence = 0.8;
};

// All times in seconds.
struct MtbfEstimate {
  double exposure_seconds = 0;  // T: running time observed
  int failures = 0;             // r: job-killing failures in it
  // With the prior: T' = T + prior, r' = r + 1 (>= 1).
  double pseudo_exposure_seconds = 0;
  int64_t pseudo_failures = 0;
  double mtbf_seconds = 0;   // T' / r'
  double confidence = 0;     // of [lower, upper]
  double lower_seconds = 0;  // 2T' / chi2(1 - alpha/2; 2r' + 2)
  double upper_seconds = 0;  // 2T' / chi2(alpha/2; 2r'): finite, as r' >= 1
  // What to plan with: the lower bound (a pessimistic MTBF checkpoints more
  // often, which costs little next to losing hours of work).
  double conservative_seconds = 0;
};

// Mean time between job-killing failures from failures over exposure time,
// assuming exponential inter-failure times, with the chi-square interval for
// time-truncated data. Pure; immutable after construction.
class MtbfEstimator {
 public:
  // REQUIRES: prior_seconds > 0 and 0 < confidence < 1.
  explicit MtbfEstimator(MtbfOptions options) : options_(options) {}

  // `exposure_seconds` < 0 or not finite counts as 0, `failures` < 0 as 0.
  MtbfEstimate Estimate(double exposure_seconds, int failures) const;

  const MtbfOptions& options() const { return options_; }

 private:
  const MtbfOptions options_;
};

// The chi-square distribution with an even number of degrees of freedom
// 2k (k >= 1), the only ones the estimator needs: the CDF is the Poisson tail
//   F(x; 2k) = P(N >= k), N ~ Poisson(x/2) = 1 - e^{-x/2} sum_{i<k} (x/2)^i / i!
// NaN for an odd or non-positive `degrees_of_freedom`.
double ChiSquareCdfEvenDof(double x, int64_t degrees_of_freedom);
// The p-quantile (0 < p < 1), to 1e-12 relative; NaN outside that domain.
double ChiSquareQuantileEvenDof(double p, int64_t degrees_of_freedom);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_MTBF_ESTIMATOR_H_
