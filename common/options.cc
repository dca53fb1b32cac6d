#include "common/options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainsup {

absl::StatusOr<absl::Duration> ParseDurationOption(absl::string_view text) {
  absl::Duration d;
  if (text.empty() || !absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a duration (examples: 500ms, 5s, 1m30s, 2h)"));
  }
  if (absl::ascii_isdigit(static_cast<unsigned char>(text.back()))) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no unit (examples: 500ms, 5s)"));
  }
  if (d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' must be a finite duration >= 0"));
  }
  return d;
}

absl::Status CheckHostPort(absl::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not HOST:PORT"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no valid port (0..65535)"));
  }
  return absl::OkStatus();
}

}  // namespace trainsup
