#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_SERIES_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_SERIES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainsup {

// The last `capacity` values of a per-step series (a job's loss, a node's
// compute time), each with its step, oldest first. Memory is taken once, at
// construction; adding never allocates. Thread-compatible.
class Series {
 public:
  // REQUIRES: capacity >= 1.
  explicit Series(size_t capacity) : steps_(capacity), values_(capacity) {}

  void Add(int64_t step, double value);
  void Clear() { size_ = 0; }

  size_t size() const { return size_; }
  size_t capacity() const { return values_.size(); }
  bool full() const { return size_ == values_.size(); }
  // The i-th oldest value kept (0: the oldest). REQUIRES: i < size().
  double value(size_t i) const { return values_[Index(i)]; }
  int64_t step(size_t i) const { return steps_[Index(i)]; }
  // The newest. REQUIRES: size() > 0.
  double back() const { return value(size_ - 1); }
  int64_t back_step() const { return step(size_ - 1); }

  // Values [from, to) (oldest first), into `out` (cleared first).
  void Values(size_t from, size_t to, std::vector<double>* out) const;
  // The median of values [from, to); 0 when the range is empty. `scratch`
  // is reused between calls.
  double Median(size_t from, size_t to, std::vector<double>* scratch) const;
  // The least-squares slope of the values over their steps, from index
  // `from` on (value units per step); 0 with fewer than two.
  double Slope(size_t from) const;

 private:
  size_t Index(size_t i) const { return (head_ + i) % values_.size(); }

  std::vector<int64_t> steps_;
  std::vector<double> values_;
  size_t head_ = 0;  // the oldest
  size_t size_ = 0;
};

// Median and scaled median absolute deviation of `values` (reordered):
// 1.4826 x MAD estimates the standard deviation of normal noise, and one
// outlier cannot move it. Both 0 when empty.
struct RobustSpread {
  double median = 0;
  double sigma = 0;
};
RobustSpread RobustSpreadOf(std::vector<double>& values);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_SERIES_H_
