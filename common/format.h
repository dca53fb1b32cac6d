#ifndef TRAINSUP_COMMON_FORMAT_H_
#define TRAINSUP_COMMON_FORMAT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// How every binary writes figures for people: event messages, logs, tables.
// One place, so the same figure reads the same everywhere. Pure.

// "3.1s": to a tenth of a second.
std::string TenthsOfSeconds(absl::Duration d);
// "46m29s" from a minute up, "2.5s" (three significant digits) below, "never"
// for an infinite time.
std::string HumanSeconds(double seconds);
// "16.2%" for 0.162.
std::string Percent(double fraction);
// "512 B", "64.0 MiB", "1.50 GiB": binary units, three significant digits.
std::string HumanBytes(double bytes);
// "2026-11-29T11:04:09.123Z": UTC, milliseconds.
std::string Timestamp(absl::Time t);

// The name of a signal number ("SIGKILL"), or "signal N" for one without.
std::string SignalName(int signal);
// How a process ended, for people: "exit code 1", "killed by SIGSEGV
// (signal 11)", "killed (SIGKILL: out of memory?)" (the OOM killer's
// signal, and the usual reason a rank dies without a word), or "exit status
// unknown" when `known` is false.
std::string ExitStatusText(bool known, int exit_code, int signal);

// Lists of nodes or ranks in events and logs stay short at any scale: at
// most this many names, then "and N more". A job of 12,500 nodes is told as
// a count and the few names that matter (the ones left out, the culprits).
inline constexpr size_t kListCap = 8;

// "a, b, c"; beyond `cap` items: "a, b, ..., h and 12492 more". Items are
// strings or numbers (ranks). Empty for an empty list.
template <typename T>
std::string ListSome(const std::vector<T>& items, size_t cap = kListCap) {
  std::string out;
  const size_t shown = items.size() <= cap ? items.size() : cap;
  for (size_t i = 0; i < shown; ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", items[i]);
  if (shown < items.size()) absl::StrAppend(&out, " and ", items.size() - shown, " more");
  return out;
}

// "1 node", "12500 nodes": a count with its noun.
std::string Counted(size_t n, absl::string_view singular, absl::string_view plural);

// Text from outside (a fence command's output, a rank's exception, an
// operator's reason) goes into protobuf string fields, which must be valid
// UTF-8: a C++ client refuses a whole message with one bad byte. So every
// place that keeps or cuts such text goes through these.

// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF).
bool IsValidUtf8(absl::string_view text);
// `text` with every byte that does not belong to a well-formed sequence
// replaced by U+FFFD; valid text comes back unchanged.
std::string ToValidUtf8(absl::string_view text);
// The longest prefix of `text` of at most `max_bytes` bytes that does not end
// inside a multi-byte sequence. Never longer than `text`.
absl::string_view Utf8Prefix(absl::string_view text, size_t max_bytes);
// `text` made valid UTF-8 and cut on a character boundary to at most
// `max_bytes` bytes, the cut marked with "..." (within the limit).
// REQUIRES: max_bytes >= 3.
std::string ClipText(absl::string_view text, size_t max_bytes);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_FORMAT_H_
