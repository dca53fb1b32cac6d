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
// An operator's reason (kept with a node, passed to the fence command).
constexpr size_t kMaxReasonLength = 512;
// The most of a fence command's output kept in its event.
constexpr size_t kMaxFenceOutputLength = 1024;
// No duration a rank reports may exceed this (a year): beyond it, a value is
// garbage, and it would overflow the 32-bit floats of the step windows.
constexpr double kMaxDurationSeconds = 365.0 * 24 * 3600;

// The largest gRPC message the supervisor accepts; agents split what they
// send to stay below it.
constexpr size_t kMaxMessageBytes = 16u << 20;

// True for 1..kMaxNameLength characters of [A-Za-z0-9._-], not beginning
// with '-': names become arguments of commands (the fence command, scontrol,
// kubectl), where a leading '-' would read as an option.
bool IsValidName(absl::string_view name);

// What a valid name looks like, for error messages.
constexpr char kNameRule[] = "1..128 characters of [A-Za-z0-9._-], not beginning with '-'";

// True for a reason of 1..kMaxReasonLength bytes of valid UTF-8 without
// control characters (it is shown on one line and passed to commands).
bool IsValidReason(absl::string_view reason);

// What a valid reason looks like, for error messages.
constexpr char kReasonRule[] = "1..512 bytes of UTF-8 text on one line";

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_LIMITS_H_
