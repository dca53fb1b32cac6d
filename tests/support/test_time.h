#ifndef TRAINSUP_TESTS_SUPPORT_TEST_TIME_H_
#define TRAINSUP_TESTS_SUPPORT_TEST_TIME_H_

// The fake time of the unit tests: every instant an offset from one epoch,
// in the unit its name says. The core takes `now` as a parameter, so a test
// names the instants it feeds it with these (or moves a FakeClock
// (common/clock.h) that starts at TestEpoch()).

#include <cstdint>

#include "absl/time/time.h"

namespace trainsup {
namespace testing {

// The tests' epoch, 1000 s after the Unix epoch: well after the instants the
// core reads as "never" (absl::InfinitePast(), the Unix epoch).
inline absl::Time TestEpoch() { return absl::FromUnixSeconds(1000); }

// `ms` milliseconds after the epoch.
inline absl::Time AtMs(int64_t ms) { return TestEpoch() + absl::Milliseconds(ms); }

// `s` seconds after the epoch, to the nanosecond (AtS(2.5) == AtMs(2500)).
inline absl::Time AtS(double s) { return TestEpoch() + absl::Seconds(s); }

// `d` after the epoch.
inline absl::Time At(absl::Duration d) { return TestEpoch() + d; }

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_TEST_TIME_H_
