#ifndef TRAINSUP_COMMON_FORMAT_H_
#define TRAINSUP_COMMON_FORMAT_H_

#include <string>

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
// "2026-11-29T11:04:09.123Z": UTC, milliseconds.
std::string Timestamp(absl::Time t);

// The name of a signal number ("SIGKILL"), or "signal N" for one without.
std::string SignalName(int signal);
// How a process ended, for people: "exit code 1", "killed by SIGSEGV
// (signal 11)", "killed (SIGKILL: out of memory?)" (the OOM killer's
// signal, and the usual reason a rank dies without a word), or "exit status
// unknown" when `known` is false.
std::string ExitStatusText(bool known, int exit_code, int signal);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_FORMAT_H_
