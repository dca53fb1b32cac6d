#include "common/options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

// A finite number, or why `text` is not one.
absl::StatusOr<double> ParseNumber(absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number"));
  }
  return value;
}

}  // namespace

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

absl::StatusOr<absl::Duration> ParsePositiveDurationOption(absl::string_view text) {
  absl::StatusOr<absl::Duration> d = ParseDurationOption(text);
  if (d.ok() && *d == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' must be longer than 0"));
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

absl::Status CheckWholeNumber(absl::string_view text, uint64_t min) {
  uint64_t value = 0;
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
  if (!digits || !absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a whole number >= ", min));
  }
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' must be at least ", min));
  }
  return absl::OkStatus();
}

absl::Status CheckNumber(absl::string_view text, double min, double max) {
  absl::StatusOr<double> value = ParseNumber(text);
  if (!value.ok()) return value.status();
  if (*value < min || *value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not in [", min, ", ", max, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckPositiveNumber(absl::string_view text) {
  absl::StatusOr<double> value = ParseNumber(text);
  if (!value.ok()) return value.status();
  if (*value <= 0) return absl::InvalidArgumentError(absl::StrCat("'", text, "' must be > 0"));
  return absl::OkStatus();
}

}  // namespace trainsup
