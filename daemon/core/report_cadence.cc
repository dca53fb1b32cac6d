#include "daemon/core/report_cadence.h"

#include <algorithm>
#include <cmath>

namespace trainsup {

namespace {

constexpr absl::Duration kStep = absl::Milliseconds(100);

}  // namespace

ReportCadence::ReportCadence(ReportCadenceOptions options)
    : options_(options),
      current_(options.budget > 0 ? options.min_interval : absl::ZeroDuration()) {}

absl::Duration ReportCadence::Wanted(uint32_t connected) const {
  if (!enabled()) return absl::ZeroDuration();
  const double seconds = static_cast<double>(connected) / options_.budget;
  // To the nearest 100ms, then within the bounds (which need not be round).
  const absl::Duration rounded = std::round(seconds * 10) * kStep;
  return std::clamp(rounded, options_.min_interval,
                    std::max(options_.min_interval, options_.max_interval));
}

std::optional<absl::Duration> ReportCadence::Update(absl::Time now, uint32_t connected) {
  if (!enabled()) return std::nullopt;
  const absl::Duration wanted = Wanted(connected);
  if (wanted == current_) return std::nullopt;
  if (now - changed_at_ < options_.hold) return std::nullopt;
  const double change = std::abs(absl::FDivDuration(wanted - current_, current_));
  if (change < options_.min_change) return std::nullopt;
  current_ = wanted;
  changed_at_ = now;
  return current_;
}

}  // namespace trainsup
