#include "daemon/core/mtbf_estimator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace trainsup {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

// sum_{i=lo..hi} e^{-y} y^i / i! for y > 0, 0 <= lo <= hi (hi = kNoEnd: to
// infinity). Starts at the term nearest the Poisson mode inside [lo, hi] and
// walks outwards with the ratio of consecutive terms; the pmf is unimodal,
// so terms only shrink from there and the walk stops once they no longer
// change the sum. That costs O(sqrt(y)) terms, not O(hi), and never forms
// e^{-y} or y^i alone (which under/overflow for large y).
double PoissonRangeSum(double y, int64_t lo, int64_t hi) {
  const double mode = std::floor(y);
  int64_t start = lo;
  if (mode > static_cast<double>(lo)) {
    start = mode >= static_cast<double>(hi) ? hi : static_cast<int64_t>(mode);
  }
  const double s = static_cast<double>(start);
  const double log_start = -y + s * std::log(y) - std::lgamma(s + 1);
  double sum = 1;  // in units of the start term
  double term = 1;
  for (int64_t i = start; i < hi; ++i) {  // terms start+1 .. hi
    term *= y / static_cast<double>(i + 1);
    sum += term;
    if (term < 1e-17 * sum) break;
  }
  term = 1;
  for (int64_t i = start; i > lo; --i) {  // terms start-1 .. lo
    term *= static_cast<double>(i) / y;
    sum += term;
    if (term < 1e-17 * sum) break;
  }
  return std::exp(log_start + std::log(sum));
}

}  // namespace

double ChiSquareCdfEvenDof(double x, int64_t degrees_of_freedom) {
  if (degrees_of_freedom < 2 || degrees_of_freedom % 2 != 0 || std::isnan(x)) return kNaN;
  if (x <= 0) return 0;
  if (std::isinf(x)) return 1;
  const int64_t k = degrees_of_freedom / 2;
  const double y = x / 2;
  // P(N >= k). Sum whichever tail is the smaller one, for accuracy.
  if (y >= static_cast<double>(k)) return 1 - PoissonRangeSum(y, 0, k - 1);
  return PoissonRangeSum(y, k, kNoEnd);
}

double ChiSquareQuantileEvenDof(double p, int64_t degrees_of_freedom) {
  if (degrees_of_freedom < 2 || degrees_of_freedom % 2 != 0 || !(p > 0 && p < 1)) return kNaN;
  // Bisection on the CDF (monotone, continuous): slow-ish but certain.
  double lo = 0;
  double hi = std::max(2.0, 2.0 * static_cast<double>(degrees_of_freedom));
  for (int i = 0; i < 64 && ChiSquareCdfEvenDof(hi, degrees_of_freedom) < p; ++i) hi *= 2;
  for (int i = 0; i < 400 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (ChiSquareCdfEvenDof(mid, degrees_of_freedom) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo + (hi - lo) / 2;
}

MtbfEstimate MtbfEstimator::Estimate(double exposure_seconds, int failures) const {
  MtbfEstimate e;
  e.exposure_seconds =
      std::isfinite(exposure_seconds) && exposure_seconds > 0 ? exposure_seconds : 0;
  e.failures = std::max(failures, 0);
  e.pseudo_exposure_seconds = e.exposure_seconds + options_.prior_seconds;
  e.pseudo_failures = static_cast<int64_t>(e.failures) + 1;
  e.mtbf_seconds = e.pseudo_exposure_seconds / static_cast<double>(e.pseudo_failures);
  e.confidence = options_.confidence;
  const double alpha = 1 - options_.confidence;
  const double twice_exposure = 2 * e.pseudo_exposure_seconds;
  e.lower_seconds =
      twice_exposure / ChiSquareQuantileEvenDof(1 - alpha / 2, 2 * e.pseudo_failures + 2);
  e.upper_seconds = twice_exposure / ChiSquareQuantileEvenDof(alpha / 2, 2 * e.pseudo_failures);
  e.conservative_seconds = e.lower_seconds;
  return e;
}

}  // namespace trainsup
