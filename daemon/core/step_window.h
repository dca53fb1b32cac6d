#ifndef TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_
#define TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainsup {

// The most recent `capacity` durations of one rank (step times, compute
// times), and their percentiles. Memory is fixed at construction: a ring of
// floats, so a 100k-rank job costs capacity * 4 bytes per rank and window.
//
// Percentiles use the nearest-rank method on the samples in the window.
// Thread-compatible (no internal locking).
class StepWindow {
 public:
  // REQUIRES: capacity >= 1.
  explicit StepWindow(size_t capacity);

  void Add(double seconds);
  void Clear();

  size_t size() const { return size_; }
  size_t capacity() const { return ring_.size(); }
  bool empty() const { return size_ == 0; }
  // Samples ever added (not bounded by the capacity).
  uint64_t total_added() const { return total_added_; }

  // The q-quantile (0 < q <= 1) of the samples in the window; 0 when empty.
  double Percentile(double q) const;

  // The samples in the window, oldest first (to persist and restore it).
  std::vector<double> Samples() const;

  // p50 and p99 with one pass over a scratch copy.
  struct Quantiles {
    double p50 = 0;
    double p99 = 0;
  };
  Quantiles P50P99() const;

 private:
  std::vector<float> ring_;
  size_t next_ = 0;  // where the next sample goes
  size_t size_ = 0;
  uint64_t total_added_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_
