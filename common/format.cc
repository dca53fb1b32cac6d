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

std::string HumanBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = bytes;
  size_t unit = 0;
  while (std::fabs(value) >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", value);
  return absl::StrFormat("%.3g %s", value, kUnits[unit]);
}

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

namespace {

// The length of the well-formed UTF-8 sequence at the start of `text`, or 0
// if there is none (RFC 3629, table 3-7 of the Unicode standard).
size_t SequenceLength(absl::string_view text) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  auto in = [&](size_t i, unsigned char low, unsigned char high) {
    return i < text.size() && byte(i) >= low && byte(i) <= high;
  };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned char low = lead == 0xE0 ? 0xA0 : 0x80;   // no overlong forms
    const unsigned char high = lead == 0xED ? 0x9F : 0xBF;  // no surrogates
    return in(1, low, high) && in(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned char low = lead == 0xF0 ? 0x90 : 0x80;   // no overlong forms
    const unsigned char high = lead == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
    return in(1, low, high) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";  // U+FFFD
constexpr char kCutMark[] = "...";

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  while (!text.empty()) {
    const size_t n = SequenceLength(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

std::string ToValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t n = SequenceLength(text);
    if (n == 0) {
      out.append(kReplacementCharacter);
      text.remove_prefix(1);
    } else {
      out.append(text.data(), n);
      text.remove_prefix(n);
    }
  }
  return out;
}

absl::string_view Utf8Prefix(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  // Back up over continuation bytes to the start of the character that the
  // cut would split (at most 3 of them in well-formed text).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80 &&
         max_bytes - cut < 3) {
    --cut;
  }
  return text.substr(0, cut);
}

std::string ClipText(absl::string_view text, size_t max_bytes) {
  std::string valid = ToValidUtf8(text);
  if (valid.size() <= max_bytes) return valid;
  const size_t mark = sizeof(kCutMark) - 1;
  return absl::StrCat(Utf8Prefix(valid, max_bytes > mark ? max_bytes - mark : 0), kCutMark);
}

std::string Counted(size_t n, absl::string_view singular, absl::string_view plural) {
  return absl::StrCat(n, " ", n == 1 ? singular : plural);
}

}  // namespace trainsup
