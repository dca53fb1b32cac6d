#include "daemon/core/format.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace trainsup {

std::string TenthsOfSeconds(absl::Duration d) {
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
}

std::string HumanSeconds(double seconds) {
  if (!std::isfinite(seconds)) return "never";
  if (seconds < 60) return absl::StrFormat("%.3gs", seconds);
  return absl::FormatDuration(absl::Seconds(std::round(seconds)));
}

std::string Percent(double fraction) { return absl::StrFormat("%.1f%%", 100 * fraction); }

}  // namespace trainsup
