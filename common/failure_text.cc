#include "common/failure_text.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/format.h"

namespace trainsup {
namespace {

// The hardware or its driver failed. Matched case-insensitively.
constexpr absl::string_view kInfrastructureMarkers[] = {
    // CUDA errors a kernel of the training code cannot cause
    "unspecified launch failure",
    "cuda error: unknown error",
    "no cuda-capable device is detected",
    "cuda-capable devices are busy or unavailable",
    // memory and the bus
    "uncorrectable",
    "ecc error",
    "gpu is lost",
    "fell off the bus",
    "fallen off the bus",
    "nvlink",
    "hardware error",
    "input/output error",
    // NCCL's own verdict on the system (not a peer's failure)
    "unhandled system error",
    "ncclsystemerror",
};

// A peer failed, seen through a collective. Matched case-insensitively.
constexpr absl::string_view kCommunicationMarkers[] = {
    // gloo
    "connection closed by peer",
    "connection reset by peer",
    "socket timeout",
    "gloo/transport",
    "broken pipe",
    // NCCL and the process group
    "nccl communicator was aborted",
    "watchdog caught collective operation timeout",
    "distbackenderror",
    "distnetworkerror",
    "ncclremoteerror",
    "remote process exited",
    "some nccl operations have failed or timed out",
    // the store and rendezvous
    "connection refused",
    "timed out waiting",
};

// The launcher's own exceptions about its children: they say that a rank
// failed, never why.
constexpr absl::string_view kLauncherExceptions[] = {"ChildFailedError", "SignalException"};

constexpr absl::string_view kExceptionSuffixes[] = {"Error", "Exception", "Exit", "Interrupt",
                                                    "Failure"};

template <size_t N>
bool ContainsAny(absl::string_view lower, const absl::string_view (&markers)[N]) {
  for (absl::string_view m : markers) {
    if (absl::StrContains(lower, m)) return true;
  }
  return false;
}

// `word` in `lower` with no letter or digit on either side.
bool ContainsWord(absl::string_view lower, absl::string_view word) {
  size_t at = 0;
  while ((at = lower.find(word, at)) != absl::string_view::npos) {
    const bool starts = at == 0 || !absl::ascii_isalnum(static_cast<unsigned char>(lower[at - 1]));
    const size_t end = at + word.size();
    const bool ends =
        end >= lower.size() || !absl::ascii_isalnum(static_cast<unsigned char>(lower[end]));
    if (starts && ends) return true;
    at = end;
  }
  return false;
}

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The exception type an exception line names ("ValueError" of "ValueError:
// bad"), or "" when `text` is not one.
absl::string_view ExceptionType(absl::string_view text) {
  const size_t colon = text.find(':');
  const absl::string_view type = text.substr(0, colon);
  if (colon != absl::string_view::npos && colon + 1 < text.size() && text[colon + 1] != ' ') {
    return "";  // "ERROR:torch.distributed..." is a log line
  }
  if (type.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(type.front()))) return "";
  for (char c : type) {
    if (!IsNameChar(c) && c != '.') return "";
  }
  const absl::string_view last = type.substr(type.rfind('.') + 1);
  for (absl::string_view suffix : kExceptionSuffixes) {
    if (absl::EndsWith(last, suffix)) return last;
  }
  return "";
}

bool IsLauncherException(absl::string_view text) {
  const absl::string_view type = ExceptionType(text);
  for (absl::string_view e : kLauncherExceptions) {
    if (type == e) return true;
  }
  return false;
}

bool IsBlank(absl::string_view text) { return absl::StripAsciiWhitespace(text).empty(); }

}  // namespace

bool HasInfrastructureMarker(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  return ContainsAny(lower, kInfrastructureMarkers) || ContainsWord(lower, "xid");
}

bool HasCommunicationMarker(absl::string_view text) {
  return ContainsAny(absl::AsciiStrToLower(text), kCommunicationMarkers);
}

LauncherLine SplitLauncherLine(absl::string_view line) {
  LauncherLine out;
  out.text = line;
  if (line.empty() || line.front() != '[') return out;
  const size_t close = line.find("]:");
  if (close == absl::string_view::npos || close < 2) return out;
  const absl::string_view inside = line.substr(1, close - 1);
  size_t digits = inside.size();
  while (digits > 0 && absl::ascii_isdigit(static_cast<unsigned char>(inside[digits - 1]))) {
    --digits;
  }
  // "[role3]:": a role name, then the local rank.
  if (digits == 0 || digits == inside.size() || inside.size() - digits > 7) return out;
  for (char c : inside.substr(0, digits)) {
    if (!IsNameChar(c)) return out;
  }
  int rank = 0;
  for (char c : inside.substr(digits)) rank = rank * 10 + (c - '0');
  out.local_rank = rank;
  out.text = line.substr(close + 2);
  return out;
}

bool IsExceptionLine(absl::string_view text) { return !ExceptionType(text).empty(); }

std::string OutputLine(absl::string_view text, size_t max_bytes) {
  std::string line = ToValidUtf8(text);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line.size() <= max_bytes ? line : ClipText(line, max_bytes);
}

std::vector<std::string> StderrExcerpt(const std::deque<std::string>& tail, size_t max_lines) {
  // The line that says what failed: infrastructure evidence first, then the
  // training code's own exception, then whatever came last.
  std::optional<size_t> cause;
  std::optional<size_t> exception;
  std::optional<size_t> last;
  for (size_t i = tail.size(); i-- > 0;) {
    const absl::string_view text = SplitLauncherLine(tail[i]).text;
    if (IsBlank(text)) continue;
    if (!last) last = i;
    if (HasInfrastructureMarker(text)) {
      cause = i;
      break;
    }
    if (!exception && IsExceptionLine(text) && !IsLauncherException(text)) exception = i;
  }
  if (!cause) cause = exception ? exception : last;
  if (!cause || max_lines == 0) return {};
  // Its context: the lines of the same stream before it, back to the start
  // of its traceback.
  const int stream = SplitLauncherLine(tail[*cause]).local_rank;
  std::vector<std::string> lines = {tail[*cause]};
  for (size_t i = *cause; i-- > 0 && lines.size() < max_lines;) {
    const LauncherLine line = SplitLauncherLine(tail[i]);
    if (line.local_rank != stream) continue;
    lines.push_back(tail[i]);
    if (absl::StartsWith(line.text, "Traceback (most recent call last)")) break;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

std::string InfrastructureLineOf(const std::deque<std::string>& tail, uint32_t local_rank) {
  for (size_t i = tail.size(); i-- > 0;) {
    const LauncherLine line = SplitLauncherLine(tail[i]);
    if (line.local_rank >= 0 && static_cast<uint32_t>(line.local_rank) != local_rank) continue;
    if (HasInfrastructureMarker(line.text)) return std::string(line.text);
  }
  return "";
}

}  // namespace trainsup
