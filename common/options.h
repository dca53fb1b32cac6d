#ifndef TRAINSUP_COMMON_OPTIONS_H_
#define TRAINSUP_COMMON_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// Option values shared by all binaries, parsed the same way everywhere.

// "5s", "1m30s", "200ms", "1h": a non-negative duration. A bare number is
// refused, so that a unit is never guessed.
absl::StatusOr<absl::Duration> ParseDurationOption(absl::string_view text);

// Like ParseDurationOption, and also refuses zero.
absl::StatusOr<absl::Duration> ParsePositiveDurationOption(absl::string_view text);

// "HOST:PORT" or "[IPv6]:PORT" with PORT 0..65535 (0: pick a free port).
absl::Status CheckHostPort(absl::string_view text);

// Decimal digits only, of value >= `min` (and < 2^64): so that "-1" is
// refused rather than read as 2^64 - 1 into an unsigned option.
absl::Status CheckWholeNumber(absl::string_view text, uint64_t min);

// A finite number in [min, max]; errors say the bounds in plain figures.
absl::Status CheckNumber(absl::string_view text, double min, double max);

// A finite number > 0.
absl::Status CheckPositiveNumber(absl::string_view text);

// Process exit codes, each value used once. Each binary's --help lists the
// ones it uses; the README lists them all.
enum ExitCode {
  kExitOk = 0,
  kExitFailure = 1,       // the request failed, or trainsupd could not start (the error says why)
  kExitUsage = 2,         // bad command line or configuration (an option, a file it names)
  kExitUnreachable = 3,   // trainsupctl: cannot reach the supervisor
  kExitNotFound = 4,      // trainsupctl: no such job / node
  kExitDenied = 5,        // trainsupctl: the supervisor refused the caller (no identity, or not allowed)
  kExitQuarantined = 75,  // agent: this node is quarantined; do not reschedule here
  kExitNodeTaken = 76,    // agent: another agent serves this --node; nothing was launched
  kExitUnsupervised = 77,  // agent, --fail-mode closed: no supervisor by --connect-timeout;
                           // nothing was launched
};

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_OPTIONS_H_
