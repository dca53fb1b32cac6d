#include "common/format.h"

#include <csignal>
#include <cmath>

#include "absl/strings/str_cat.h"
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

std::string Timestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string SignalName(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
  }
  return absl::StrCat("signal ", signal);
}

std::string ExitStatusText(bool known, int exit_code, int signal) {
  if (!known) return "exit status unknown";
  if (signal == SIGKILL) return "killed (SIGKILL: out of memory?)";
  if (signal != 0) return absl::StrCat("killed by ", SignalName(signal), " (signal ", signal, ")");
  return absl::StrCat("exit code ", exit_code);
}

}  // namespace trainsup
