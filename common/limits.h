#ifndef TRAINSUP_COMMON_LIMITS_H_
#define TRAINSUP_COMMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace trainsup {

// Limits on what the wire may carry, shared by every binary: the agent checks
// its own flags against them, the supervisor every field it receives.

constexpr size_t kMaxNameLength = 128;          // job ids and node names
constexpr uint32_t kMaxWorldSize = 1u << 20;    // 1,048,576 ranks
constexpr size_t kMaxExceptionTypeLength = 256;
constexpr size_t kMaxExceptionMessageLength = 1024;
// No duration a rank reports may exceed this (a year): beyond it, a value is
// garbage, and it would overflow the 32-bit floats of the step windows.
constexpr double kMaxDurationSeconds = 365.0 * 24 * 3600;

// The largest gRPC message the supervisor accepts; agents split what they
// send to stay below it.
constexpr size_t kMaxMessageBytes = 16u << 20;

// True for 1..kMaxNameLength characters of [A-Za-z0-9._-].
bool IsValidName(absl::string_view name);

// What a valid name looks like, for error messages.
constexpr char kNameRule[] = "1..128 characters of [A-Za-z0-9._-]";

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_LIMITS_H_
