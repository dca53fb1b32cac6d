#include "daemon/core/signals/generation_record.h"

#include <algorithm>

namespace trainsup {

void GenerationRecord::Add(const StepSummary& s) {
  if (steps_.size() < kCapacity) {
    if (steps_.empty()) steps_.reserve(kCapacity);
    steps_.push_back(s);
    return;
  }
  steps_[head_] = s;
  head_ = (head_ + 1) % kCapacity;
}

std::optional<StepSummary> GenerationRecord::Find(int64_t step) const {
  // In step order from head_: a binary search over the rotated ring.
  size_t lo = 0, hi = steps_.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    const StepSummary& s = steps_[(head_ + mid) % steps_.size()];
    if (s.step == step) return s;
    if (s.step < step) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return std::nullopt;
}

int64_t GenerationRecord::first_step() const {
  return steps_.empty() ? -1 : steps_[head_ % steps_.size()].step;
}

int64_t GenerationRecord::last_step() const {
  if (steps_.empty()) return -1;
  return steps_[(head_ + steps_.size() - 1) % steps_.size()].step;
}

}  // namespace trainsup
