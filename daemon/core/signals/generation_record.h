#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_GENERATION_RECORD_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_GENERATION_RECORD_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace trainsup {

// What a step of the job looked like, for comparing a resume with what the
// generation before it did at the same step (loss, learning rate, data
// position).
struct StepSummary {
  int64_t step = -1;
  std::optional<double> loss;  // mean over ranks (finite ones)
  std::optional<double> learning_rate;
  uint64_t samples = 0;  // summed over ranks (0: not sent)
  uint64_t tokens = 0;
  uint32_t ranks = 0;  // STEPs counted
};

// The last kCapacity steps of one generation, in step order. Memory is
// taken once, at the first step. Thread-compatible.
class GenerationRecord {
 public:
  static constexpr size_t kCapacity = 256;

  explicit GenerationRecord(uint64_t generation = 0) : generation_(generation) {}

  uint64_t generation() const { return generation_; }
  // Appends `s` (REQUIRES: its step is above every step kept).
  void Add(const StepSummary& s);
  // The step `step` if kept.
  std::optional<StepSummary> Find(int64_t step) const;
  // The oldest and newest steps kept; -1 when empty.
  int64_t first_step() const;
  int64_t last_step() const;
  size_t size() const { return steps_.size(); }
  // Calls `f(const StepSummary&)` for each step kept, in step order.
  template <typename F>
  void ForEach(F f) const {
    for (size_t i = 0; i < steps_.size(); ++i) f(steps_[(head_ + i) % steps_.size()]);
  }

  // Calls fn(const StepSummary&) for each step kept after `step`, in order.
  template <typename Fn>
  void ForEachAfter(int64_t step, Fn fn) const {
    ForEach([&](const StepSummary& s) {
      if (s.step > step) fn(s);
    });
  }

 private:
  uint64_t generation_;
  std::vector<StepSummary> steps_;  // a ring once full
  size_t head_ = 0;                 // the oldest once full
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_GENERATION_RECORD_H_
