#include "daemon/core/signals/throughput_rule.h"

#include <algorithm>
#include <cmath>

#include "daemon/core/job_stats.h"

namespace trainsup {

ThroughputRule::ThroughputRule(const ThroughputOptions& options)
    : options_(options),
      recent_(static_cast<size_t>(std::max(options.baseline, 2 * options.confirm))) {}

void ThroughputRule::Update(Side& side, double deviation, int64_t step, absl::Time time,
                            double seconds) {
  side.sum = std::max(0.0, side.sum + deviation - options_.change / 2);
  if (side.sum == 0) {
    side.onset_step = -1;
    return;
  }
  if (side.onset_step < 0) {
    side.onset_step = step;
    side.onset_time = time;
    side.count = 0;
    side.first.clear();
  }
  ++side.count;
  if (side.first.size() < static_cast<size_t>(options_.confirm)) side.first.push_back(seconds);
}

void ThroughputRule::Observe(int64_t step, absl::Time time, double seconds) {
  if (++seen_ <= options_.warmup) return;
  if (reference_ == 0) {
    recent_.Add(step, seconds);
    if (recent_.size() < static_cast<size_t>(options_.baseline)) return;
    recent_.Values(0, recent_.size(), &scratch_);
    const RobustSpread spread = RobustSpreadOf(scratch_);
    if (spread.median <= 0) return;
    reference_ = first_reference_ = spread.median;
    noise_ = spread.sigma / spread.median;
    return;
  }
  const double limit = 3 * options_.change;
  const double deviation = std::clamp(seconds / reference_ - 1, -limit, limit);
  Update(up_, deviation, step, time, seconds);
  Update(down_, -deviation, step, time, seconds);
  recent_.Add(step, seconds);
}

int ThroughputRule::Moving() const {
  const double half = options_.confirm * options_.change / 4;
  if (up_.sum >= half) return 1;
  if (down_.sum >= half) return -1;
  return 0;
}

std::optional<double> ThroughputRule::Ratio() const {
  if (first_reference_ <= 0 || recent_.size() == 0) return std::nullopt;
  const size_t n = std::min(recent_.size(), static_cast<size_t>(options_.confirm));
  return recent_.Median(recent_.size() - n, recent_.size(), &scratch_) / first_reference_;
}

void ThroughputRule::Rebase(double reference) {
  reference_ = reference;
  up_ = Side();
  down_ = Side();
}

std::optional<ThroughputFinding> ThroughputRule::Confirm(int direction, const Side& side,
                                                         absl::Time now) {
  const double threshold = options_.confirm * options_.change / 2;
  if (side.onset_step < 0 || side.sum < threshold) return std::nullopt;
  if (side.count < options_.confirm || now - side.onset_time < options_.confirm_time) {
    return std::nullopt;
  }
  // The level since the onset (as far back as the recent steps go), and
  // the level now: both must be off the reference.
  size_t from = recent_.size();
  while (from > 0 && recent_.step(from - 1) >= side.onset_step) --from;
  const double after = recent_.Median(from, recent_.size(), &scratch_);
  const size_t last_from =
      std::max(from, recent_.size() - std::min(recent_.size(), static_cast<size_t>(options_.confirm)));
  const double last = recent_.Median(last_from, recent_.size(), &scratch_);
  const double needed =
      std::max(options_.change, 5 * noise_ / std::sqrt(static_cast<double>(options_.confirm)));
  const double moved = direction * (after / reference_ - 1);
  if (moved < needed || direction * (last / reference_ - 1) < needed) return std::nullopt;

  ThroughputFinding f;
  f.onset_step = side.onset_step;
  f.step = recent_.back_step();
  f.before_s = reference_;
  f.after_s = after;
  f.ratio = after / reference_;
  f.steps = side.count;
  f.held = now - side.onset_time;
  // A step change holds its level from the onset on; a decay is still
  // moving: its trend since the onset, over the steps since, is at least
  // half the move.
  const double trend = direction * recent_.Slope(from) / reference_ * static_cast<double>(side.count);
  f.decay = trend >= moved / 2;
  Rebase(last);
  return f;
}

std::optional<ThroughputFinding> ThroughputRule::Check(absl::Time now) {
  if (reference_ <= 0) return std::nullopt;
  if (std::optional<ThroughputFinding> slower = Confirm(+1, up_, now)) return slower;
  // A speedup needs no one's attention: it becomes the reference.
  (void)Confirm(-1, down_, now);
  return std::nullopt;
}

}  // namespace trainsup
