#include "common/gpu_clock_reasons.h"

#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace trainsup {

std::string SlowingReasonsText(uint64_t reasons) {
  // The most telling first: heat, then power.
  std::vector<absl::string_view> names;
  if (reasons & kClockHwThermalSlowdown) names.push_back("hardware thermal slowdown");
  if (reasons & kClockSwThermalSlowdown) names.push_back("software thermal slowdown");
  if (reasons & kClockHwPowerBrakeSlowdown) names.push_back("power brake slowdown");
  if (reasons & kClockHwSlowdown) names.push_back("hardware slowdown");
  if (reasons & kClockSwPowerCap) names.push_back("power cap");
  return absl::StrJoin(names, ", ");
}

}  // namespace trainsup
