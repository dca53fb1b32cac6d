#ifndef TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_
#define TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainsup {

// The most recent `capacity` durations of one rank (step times, compute
// times), and their percentiles.
//
// The samples are kept sorted, each with its arrival number, so that a
// percentile is one lookup: the sweep reads every rank's p50/p99 every
// second, and at 100k ranks re-selecting them from a ring each time cost
// more than everything else the sweep does. Adding a sample moves at most
// `capacity` floats and never allocates after the first. Memory (6 bytes per
// sample) is taken at the first sample, so a window that never gets one (a
// rank without hb.compute()) costs nothing.
//
// Percentiles use the nearest-rank method on the samples in the window.
// Thread-compatible (no internal locking).
class StepWindow {
 public:
  // REQUIRES: 1 <= capacity <= 65535 (arrival numbers are 16-bit).
  explicit StepWindow(size_t capacity);

  void Add(double seconds);
  void Clear();

  size_t size() const { return sorted_.size(); }
  size_t capacity() const { return capacity_; }
  bool empty() const { return sorted_.empty(); }
  // Samples ever added (not bounded by the capacity).
  uint64_t total_added() const { return total_added_; }

  // The q-quantile (0 < q <= 1) of the samples in the window; 0 when empty.
  double Percentile(double q) const;

  // The samples in the window, oldest first (to persist and restore it).
  std::vector<double> Samples() const;

  // Makes the window read `p50` and `p99` (P50P99() and Percentile at 0.5
  // and 0.99) from two samples: a window kept as its percentiles only. Both
  // 0: an empty window. REQUIRES: capacity() >= 2, p50 <= p99.
  void RestoreQuantiles(double p50, double p99);

  struct Quantiles {
    double p50 = 0;
    double p99 = 0;
  };
  // Kept beside the window as samples arrive: reading them touches the rank's
  // state only, never the samples' memory (a cache miss per rank at 100k
  // ranks was the sweep's largest cost).
  Quantiles P50P99() const { return {p50_, p99_}; }

 private:
  // The arrival number of the oldest sample in the window.
  uint16_t OldestArrival() const;

  void UpdateQuantiles();

  uint32_t capacity_;
  float p50_ = 0;
  float p99_ = 0;
  std::vector<float> sorted_;        // ascending
  std::vector<uint16_t> arrival_;    // arrival_[i]: when sorted_[i] came (mod 2^16)
  uint64_t total_added_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STEP_WINDOW_H_
