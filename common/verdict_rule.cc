#include "common/verdict_rule.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/limits.h"

namespace trainsup {
namespace {

constexpr std::pair<VerdictAction, absl::string_view> kActionNames[] = {
    {VerdictAction::kDefault, "default"},
    {VerdictAction::kRestartElsewhere, "restart-elsewhere"},
    {VerdictAction::kTransient, "transient"},
    {VerdictAction::kStop, "stop"},
};

// An exception type as Python names it: a (dotted) identifier.
bool IsExceptionTypeName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxExceptionTypeLength) return false;
  if (!absl::ascii_isalpha(static_cast<unsigned char>(name.front())) && name.front() != '_') {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

absl::string_view VerdictActionName(VerdictAction action) {
  for (const auto& [a, name] : kActionNames) {
    if (a == action) return name;
  }
  return "unspecified";
}

std::optional<VerdictAction> VerdictActionFromName(absl::string_view name) {
  for (const auto& [action, n] : kActionNames) {
    if (n == name) return action;
  }
  return std::nullopt;
}

std::string VerdictRule::ToString() const {
  return absl::StrCat(exit_code ? absl::StrCat("exit:", *exit_code)
                                : absl::StrCat("exception:", exception_type),
                      "=", VerdictActionName(action));
}

absl::StatusOr<VerdictRule> ParseVerdictRule(absl::string_view text) {
  const absl::string_view rule = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verdict rule '", rule.substr(0, kMaxVerdictRuleLength), "': ", why,
        " (write exit:CODE=ACTION or exception:TYPE=ACTION; ACTION is restart-elsewhere, "
        "transient, stop or default)"));
  };
  if (rule.size() > kMaxVerdictRuleLength) {
    return bad(absl::StrCat("longer than ", kMaxVerdictRuleLength, " bytes"));
  }
  const std::pair<absl::string_view, absl::string_view> key_action =
      absl::StrSplit(rule, absl::MaxSplits('=', 1));
  const std::pair<absl::string_view, absl::string_view> kind_value =
      absl::StrSplit(key_action.first, absl::MaxSplits(':', 1));
  const absl::string_view kind = absl::StripAsciiWhitespace(kind_value.first);
  const absl::string_view value = absl::StripAsciiWhitespace(kind_value.second);
  const std::optional<VerdictAction> action =
      VerdictActionFromName(absl::StripAsciiWhitespace(key_action.second));
  if (!action) return bad("no known action after '='");
  VerdictRule out;
  out.action = *action;
  if (kind == "exit") {
    int code = 0;
    if (!absl::SimpleAtoi(value, &code) || code < kMinVerdictExitCode ||
        code > kMaxVerdictExitCode) {
      return bad(absl::StrCat("the exit code must be ", kMinVerdictExitCode, "..",
                              kMaxVerdictExitCode));
    }
    out.exit_code = code;
  } else if (kind == "exception") {
    if (!IsExceptionTypeName(value)) {
      return bad("the exception type must be a Python name such as LossSpikeError");
    }
    out.exception_type = std::string(value);
  } else {
    return bad("it must begin with exit: or exception:");
  }
  return out;
}

absl::Status CheckJobVerdictRules(const std::vector<std::string>& rules) {
  if (rules.size() > kMaxJobVerdictRules) {
    return absl::InvalidArgumentError(
        absl::StrCat(rules.size(), " verdict rules; a job may have at most ", kMaxJobVerdictRules));
  }
  for (const std::string& rule : rules) {
    if (absl::Status parsed = ParseVerdictRule(rule).status(); !parsed.ok()) return parsed;
  }
  return absl::OkStatus();
}

}  // namespace trainsup
