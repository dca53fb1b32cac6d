#include "daemon/core/step_window.h"

#include <algorithm>
#include <cmath>

namespace trainsup {
namespace {

// Index of the nearest-rank q-quantile among n sorted samples.
size_t NearestRankIndex(double q, size_t n) {
  double rank = std::ceil(q * static_cast<double>(n));
  if (rank < 1) rank = 1;
  if (rank > static_cast<double>(n)) rank = static_cast<double>(n);
  return static_cast<size_t>(rank) - 1;
}

}  // namespace

StepWindow::StepWindow(size_t capacity) : ring_(capacity == 0 ? 1 : capacity, 0.0f) {}

void StepWindow::Add(double seconds) {
  ring_[next_] = static_cast<float>(seconds);
  next_ = (next_ + 1) % ring_.size();
  if (size_ < ring_.size()) ++size_;
  ++total_added_;
}

void StepWindow::Clear() {
  next_ = 0;
  size_ = 0;
}

double StepWindow::Percentile(double q) const {
  if (size_ == 0) return 0;
  std::vector<float> scratch(ring_.begin(), ring_.begin() + size_);
  size_t k = NearestRankIndex(q, size_);
  std::nth_element(scratch.begin(), scratch.begin() + k, scratch.end());
  return scratch[k];
}

std::vector<double> StepWindow::Samples() const {
  std::vector<double> out;
  out.reserve(size_);
  // Until the ring wraps, the samples are ring_[0, size_); after, the oldest
  // is where the next one goes.
  const size_t first = size_ < ring_.size() ? 0 : next_;
  for (size_t i = 0; i < size_; ++i) out.push_back(ring_[(first + i) % ring_.size()]);
  return out;
}

StepWindow::Quantiles StepWindow::P50P99() const {
  Quantiles out;
  if (size_ == 0) return out;
  std::vector<float> scratch(ring_.begin(), ring_.begin() + size_);
  size_t k99 = NearestRankIndex(0.99, size_);
  size_t k50 = NearestRankIndex(0.50, size_);
  // p99 first; then p50 lies in the left part, which nth_element partitioned.
  std::nth_element(scratch.begin(), scratch.begin() + k99, scratch.end());
  out.p99 = scratch[k99];
  std::nth_element(scratch.begin(), scratch.begin() + k50, scratch.begin() + k99 + 1);
  out.p50 = scratch[k50];
  return out;
}

}  // namespace trainsup
