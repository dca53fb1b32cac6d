#ifndef TRAINSUP_COMMON_FAILURE_TEXT_H_
#define TRAINSUP_COMMON_FAILURE_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainsup {

// What the text of a failure says about where the fault lies: an exception's
// type and message, or a line a process wrote to stderr. One list for the
// whole system: the agent looks for these in a rank's stderr, the
// supervisor's classifier (daemon/core/failure_classifier.h) in everything a
// rank reports. docs/detection.md lists them. Pure.

// The hardware or its driver failed (a CUDA "unspecified launch failure",
// ECC, an Xid, NCCL's "unhandled system error", a GPU fallen off the bus):
// the node is to blame, whatever runs on it. Case-insensitive; "Xid" only as
// a word (not in "oxide").
bool HasInfrastructureMarker(absl::string_view text);

// A peer failed and this rank learned of it through its collective (gloo's
// "Connection closed by peer", NCCL's "communicator was aborted", the store's
// "connection refused"): the rank is a victim. Case-insensitive.
bool HasCommunicationMarker(absl::string_view text);

// A line torchrun copied from a rank's stderr into its own with --tee
// ("[default3]:text"): the rank's local rank and its text. Any other line:
// local_rank -1 and the whole line.
struct LauncherLine {
  int local_rank = -1;
  absl::string_view text;
};
LauncherLine SplitLauncherLine(absl::string_view line);

// True for the last line of a Python traceback, "Type: message" or "Type",
// where Type is a (dotted) name ending in Error, Exception, Exit, Interrupt
// or Failure. Logging lines ("ERROR:torch.distributed...") are not.
bool IsExceptionLine(absl::string_view text);

// Text from a process's output as trainsup keeps it: valid UTF-8 (bad bytes
// replaced by U+FFFD), control characters (tabs, escapes, carriage
// returns) replaced by spaces, trailing spaces dropped, and cut on a
// character boundary at `max_bytes` (marked "..."). REQUIRES: max_bytes >= 3.
std::string OutputLine(absl::string_view text, size_t max_bytes);

// The most a kept stderr line may hold, and how many lines of a command's
// stderr go with its failure.
inline constexpr size_t kMaxStderrLineBytes = 256;
inline constexpr size_t kMaxStderrExcerptLines = 8;

// What to send of a command's last stderr lines (`tail`, oldest first) with
// its failure: at most `max_lines` lines ending at the line that says what
// failed, with the lines of the same stream (the same rank's, by torchrun's
// prefix) before it, from its traceback's start at most. The line that says
// what failed is the last one that names an infrastructure fault, else the
// last exception line that is not the launcher's own report of its children
// (torchrun's ChildFailedError, SignalException), else the last non-empty
// line. Empty when `tail` has no non-empty line. Lines are kept as they are
// (OutputLine first).
std::vector<std::string> StderrExcerpt(const std::deque<std::string>& tail,
                                       size_t max_lines = kMaxStderrExcerptLines);

// The last line of `tail` that names an infrastructure fault and comes from
// the rank of local rank `local_rank` (torchrun's "[roleN]:" prefix) or from
// no rank in particular (no prefix: ranks that write to the launcher's own
// stderr); "" when there is none.
std::string InfrastructureLineOf(const std::deque<std::string>& tail, uint32_t local_rank);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_FAILURE_TEXT_H_
