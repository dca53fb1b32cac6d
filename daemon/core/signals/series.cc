#include "daemon/core/signals/series.h"

#include <cmath>

#include "daemon/core/job_stats.h"

namespace trainsup {

void Series::Add(int64_t step, double value) {
  if (size_ < values_.size()) {
    steps_[Index(size_)] = step;
    values_[Index(size_)] = value;
    ++size_;
    return;
  }
  steps_[head_] = step;
  values_[head_] = value;
  head_ = (head_ + 1) % values_.size();
}

void Series::Values(size_t from, size_t to, std::vector<double>* out) const {
  out->clear();
  for (size_t i = from; i < to && i < size_; ++i) out->push_back(value(i));
}

double Series::Median(size_t from, size_t to, std::vector<double>* scratch) const {
  Values(from, to, scratch);
  return MedianInPlace(*scratch);
}

double Series::Slope(size_t from) const {
  if (from + 2 > size_) return 0;
  const double n = static_cast<double>(size_ - from);
  double mean_x = 0, mean_y = 0;
  for (size_t i = from; i < size_; ++i) {
    mean_x += static_cast<double>(step(i));
    mean_y += value(i);
  }
  mean_x /= n;
  mean_y /= n;
  double sxy = 0, sxx = 0;
  for (size_t i = from; i < size_; ++i) {
    const double dx = static_cast<double>(step(i)) - mean_x;
    sxy += dx * (value(i) - mean_y);
    sxx += dx * dx;
  }
  return sxx > 0 ? sxy / sxx : 0;
}

RobustSpread RobustSpreadOf(std::vector<double>& values) {
  RobustSpread out;
  if (values.empty()) return out;
  out.median = MedianInPlace(values);
  for (double& v : values) v = std::fabs(v - out.median);
  out.sigma = 1.4826 * MedianInPlace(values);
  return out;
}

}  // namespace trainsup
