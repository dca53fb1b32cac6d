#ifndef TRAINSUP_DAEMON_CORE_FORMAT_H_
#define TRAINSUP_DAEMON_CORE_FORMAT_H_

#include <string>

#include "absl/time/time.h"

namespace trainsup {

// How the core writes figures into its event messages.

// "3.1s": to a tenth of a second.
std::string TenthsOfSeconds(absl::Duration d);
// "46m29s" from a minute up, "2.5s" (three significant digits) below, "never"
// for an infinite time.
std::string HumanSeconds(double seconds);
// "16.2%" for 0.162.
std::string Percent(double fraction);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_FORMAT_H_
