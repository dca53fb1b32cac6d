#include "daemon/core/goodput_ledger.h"

#include <algorithm>
#include <numeric>

namespace trainsup {

absl::string_view BucketName(Bucket bucket) {
  switch (bucket) {
    case Bucket::kUseful:
      return "useful";
    case Bucket::kStarved:
      return "starved";
    case Bucket::kCheckpointBlocked:
      return "checkpoint_blocked";
    case Bucket::kLost:
      return "lost";
    case Bucket::kCount:
      break;
  }
  return "unknown";
}

double LedgerTotals::wall_seconds() const {
  return std::accumulate(seconds.begin(), seconds.end(), 0.0);
}

double LedgerTotals::goodput() const {
  const double wall = wall_seconds();
  return wall > 0 ? seconds[static_cast<int>(Bucket::kUseful)] / wall : 0;
}

LedgerState GoodputLedger::State() const {
  LedgerState state;
  state.start = start_;
  state.last = last_;
  state.generation = generation_;
  state.high_water_step = high_water_step_;
  state.by_generation = by_generation_;
  return state;
}

GoodputLedger GoodputLedger::FromState(const LedgerState& state) {
  GoodputLedger ledger;
  ledger.start_ = state.start;
  ledger.last_ = state.last;
  ledger.generation_ = state.generation;
  ledger.high_water_step_ = state.high_water_step;
  ledger.by_generation_ = state.by_generation;
  for (const auto& [generation, totals] : state.by_generation) {
    for (int b = 0; b < kBucketCount; ++b) ledger.totals_.seconds[b] += totals.seconds[b];
  }
  return ledger;
}

void GoodputLedger::Add(uint64_t generation, Bucket bucket, double seconds) {
  if (seconds <= 0) return;
  totals_.seconds[static_cast<int>(bucket)] += seconds;
  by_generation_[generation].seconds[static_cast<int>(bucket)] += seconds;
}

void GoodputLedger::Advance(absl::Time now, uint64_t generation,
                            const std::vector<FrontierStep>& steps) {
  if (steps.empty()) return;
  if (start_ == absl::InfinitePast()) {
    // The ledger starts at the job's first step: nothing before it to split.
    start_ = last_ = now;
    generation_ = generation;
    for (const FrontierStep& s : steps) high_water_step_ = std::max(high_water_step_, s.step);
    return;
  }
  const double stretch = std::max(0.0, absl::ToDoubleSeconds(now - last_));
  last_ = std::max(last_, now);
  if (generation != generation_) {
    // From the old generation's last step to the new one's first: the
    // failure, its detection, the stop and the relaunch.
    generation_ = generation;
    Add(generation, Bucket::kLost, stretch);
    for (const FrontierStep& s : steps) high_water_step_ = std::max(high_water_step_, s.step);
    return;
  }
  // Share the stretch among its steps by their measured durations (equally
  // when none was measured).
  double total = 0;
  for (const FrontierStep& s : steps) total += std::max(0.0, s.duration_s);
  for (const FrontierStep& s : steps) {
    const double share =
        total > 0 ? stretch * std::max(0.0, s.duration_s) / total : stretch / steps.size();
    if (s.step <= high_water_step_) {
      Add(generation, Bucket::kLost, share);  // done before the failure: re-done
      continue;
    }
    high_water_step_ = s.step;
    const double d = std::max(s.duration_s, s.data_wait_s + s.checkpoint_s);
    const double starved = d > 0 ? share * std::clamp(s.data_wait_s / d, 0.0, 1.0) : 0;
    const double blocked =
        d > 0 ? std::min(share - starved, share * std::clamp(s.checkpoint_s / d, 0.0, 1.0)) : 0;
    Add(generation, Bucket::kStarved, starved);
    Add(generation, Bucket::kCheckpointBlocked, blocked);
    Add(generation, Bucket::kUseful, share - starved - blocked);
  }
}

}  // namespace trainsup
