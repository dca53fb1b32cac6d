#ifndef TRAINSUP_DAEMON_CORE_GOODPUT_LEDGER_H_
#define TRAINSUP_DAEMON_CORE_GOODPUT_LEDGER_H_

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// Where a job's wall time went:
//   wall = useful + starved + checkpoint_blocked + lost,  goodput = useful / wall.
enum class Bucket {
  kUseful = 0,         // training steps done for the first time
  kStarved,            // ... the part of them spent waiting on input (data_wait)
  kCheckpointBlocked,  // the loop blocked writing a checkpoint
  kLost,               // steps re-done after a failure, and failure -> first step of
                       // the next generation (including what a hang burned undetected)
  kCount,
};
constexpr int kBucketCount = static_cast<int>(Bucket::kCount);
absl::string_view BucketName(Bucket bucket);  // "useful", "starved", ...

struct LedgerTotals {
  std::array<double, kBucketCount> seconds{};
  double wall_seconds() const;
  double goodput() const;  // useful / wall; 0 before any time is accounted
};

// Everything a ledger holds, to keep it across a supervisor restart.
struct LedgerState {
  absl::Time start = absl::InfinitePast();
  absl::Time last = absl::InfinitePast();
  uint64_t generation = 0;
  int64_t high_water_step = -1;
  std::map<uint64_t, LedgerTotals> by_generation;  // the totals are their sum
};

// One step the job completed for the first time in its generation (the
// frontier moved), with the figures its rank measured for it.
struct FrontierStep {
  int64_t step = 0;
  double duration_s = 0;    // the rank's wall time of the step
  double data_wait_s = 0;   // of which waiting on input
  double checkpoint_s = 0;  // blocking checkpoint time since the rank's previous step
};

// Accounts a job's wall time, across its generations, from the moments its
// frontier (the highest step completed) moves, by the supervisor's clock:
// each stretch between two moves is given to the steps completed in it,
// split into useful / starved / checkpoint-blocked by what their ranks
// measured, or lost when the steps were done before (re-done after a
// failure) or when a new generation began (the stretch from the last step
// of the old one to the first step of the new one). So the buckets add up to
// the wall time exactly, from the job's first step to its latest. The time
// before the first step (the first launch) is not in the ledger.
// Pure; thread-compatible.
class GoodputLedger {
 public:
  // The frontier moved at `now` in `generation` through `steps` (in order).
  void Advance(absl::Time now, uint64_t generation, const std::vector<FrontierStep>& steps);

  // What it holds, and a ledger that goes on from a saved state.
  LedgerState State() const;
  static GoodputLedger FromState(const LedgerState& state);

  const LedgerTotals& totals() const { return totals_; }
  const std::map<uint64_t, LedgerTotals>& by_generation() const { return by_generation_; }
  absl::Time first_step_time() const { return start_; }
  absl::Time last_step_time() const { return last_; }

 private:
  void Add(uint64_t generation, Bucket bucket, double seconds);

  absl::Time start_ = absl::InfinitePast();
  absl::Time last_ = absl::InfinitePast();
  uint64_t generation_ = 0;
  int64_t high_water_step_ = -1;  // highest step ever completed, across generations
  LedgerTotals totals_;
  std::map<uint64_t, LedgerTotals> by_generation_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_GOODPUT_LEDGER_H_
