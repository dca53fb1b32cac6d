#include "daemon/core/step_window.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trainsup {
namespace {

constexpr size_t kMaxCapacity = UINT16_MAX;

// Index of the nearest-rank q-quantile among n sorted samples.
size_t NearestRankIndex(double q, size_t n) {
  double rank = std::ceil(q * static_cast<double>(n));
  if (rank < 1) rank = 1;
  if (rank > static_cast<double>(n)) rank = static_cast<double>(n);
  return static_cast<size_t>(rank) - 1;
}

}  // namespace

StepWindow::StepWindow(size_t capacity)
    : capacity_(static_cast<uint32_t>(std::clamp<size_t>(capacity, 1, kMaxCapacity))) {}

uint16_t StepWindow::OldestArrival() const {
  return static_cast<uint16_t>(total_added_ - sorted_.size());
}

void StepWindow::Add(double seconds) {
  if (sorted_.capacity() == 0) {
    sorted_.reserve(capacity_);
    arrival_.reserve(capacity_);
  }
  if (sorted_.size() == capacity_) {
    // Arrival numbers in the window are distinct (capacity < 2^16), so the
    // oldest is found by its number alone.
    const auto oldest = std::find(arrival_.begin(), arrival_.end(), OldestArrival());
    const size_t at = static_cast<size_t>(oldest - arrival_.begin());
    sorted_.erase(sorted_.begin() + at);
    arrival_.erase(oldest);
  }
  const float value = static_cast<float>(seconds);
  const size_t at =
      static_cast<size_t>(std::upper_bound(sorted_.begin(), sorted_.end(), value) - sorted_.begin());
  sorted_.insert(sorted_.begin() + at, value);
  arrival_.insert(arrival_.begin() + at, static_cast<uint16_t>(total_added_));
  ++total_added_;
  UpdateQuantiles();
}

void StepWindow::UpdateQuantiles() {
  p50_ = static_cast<float>(Percentile(0.50));
  p99_ = static_cast<float>(Percentile(0.99));
}

void StepWindow::Clear() {
  sorted_.clear();
  arrival_.clear();
  UpdateQuantiles();
}

void StepWindow::RestoreQuantiles(double p50, double p99) {
  Clear();
  if (p50 == 0 && p99 == 0) return;
  // The nearest rank of 0.5 among two samples is the first, of 0.99 the second.
  Add(p50);
  Add(p99);
}

double StepWindow::Percentile(double q) const {
  if (sorted_.empty()) return 0;
  return sorted_[NearestRankIndex(q, sorted_.size())];
}

std::vector<double> StepWindow::Samples() const {
  // Order the slots by age: the distance of their arrival number from the
  // oldest one, modulo 2^16.
  const uint16_t oldest = OldestArrival();
  std::vector<size_t> order(sorted_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<uint16_t>(arrival_[a] - oldest) < static_cast<uint16_t>(arrival_[b] - oldest);
  });
  std::vector<double> out;
  out.reserve(order.size());
  for (size_t i : order) out.push_back(sorted_[i]);
  return out;
}

}  // namespace trainsup
