#include "daemon/core/verdicts.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

Verdict FromRule(const VerdictRule& rule, Verdict::Source source, bool job_rule) {
  Verdict v;
  v.action = rule.action;
  v.source = source;
  v.found_by = absl::StrCat(job_rule ? "the job's rule " : "trainsupd's rule ", rule.ToString());
  return v;
}

}  // namespace

VerdictTable VerdictTable::Defaults() {
  VerdictTable table;
  // Megatron-LM's rerun state machine: 16 "restart from the checkpoint on
  // different hardware", 17 "a result failed validation" (restarted as a
  // transient fault: docs/signals.md says why, and how to stop instead).
  table.Set({16, "", VerdictAction::kRestartElsewhere});
  table.Set({17, "", VerdictAction::kTransient});
  // llm-foundry's KillLossSpike: "stop the run without retry".
  table.Set({std::nullopt, "LossSpikeError", VerdictAction::kStop});
  table.Set({std::nullopt, "HighLossError", VerdictAction::kStop});
  return table;
}

absl::StatusOr<VerdictTable> VerdictTable::FromRules(const std::vector<std::string>& rules) {
  VerdictTable table;
  for (const std::string& text : rules) {
    absl::StatusOr<VerdictRule> rule = ParseVerdictRule(text);
    if (!rule.ok()) return rule.status();
    table.Set(*std::move(rule));
  }
  return table;
}

void VerdictTable::Set(VerdictRule rule) {
  for (VerdictRule& r : rules_) {
    if (r.exit_code == rule.exit_code && r.exception_type == rule.exception_type) {
      r = std::move(rule);
      return;
    }
  }
  rules_.push_back(std::move(rule));
}

absl::Status VerdictTable::AddText(absl::string_view text) {
  std::vector<VerdictRule> parsed;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = line.substr(0, line.find('#'));
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<VerdictRule> rule = ParseVerdictRule(line);
    if (!rule.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", number, ": ", rule.status().message()));
    }
    parsed.push_back(*std::move(rule));
  }
  for (VerdictRule& rule : parsed) Set(std::move(rule));
  return absl::OkStatus();
}

const VerdictRule* VerdictTable::ForExitCode(int32_t exit_code) const {
  for (const VerdictRule& r : rules_) {
    if (r.exit_code == exit_code) return &r;
  }
  return nullptr;
}

const VerdictRule* VerdictTable::ForException(absl::string_view type) const {
  for (const VerdictRule& r : rules_) {
    if (!r.exit_code && r.exception_type == type) return &r;
  }
  return nullptr;
}

absl::string_view VerdictSourceName(Verdict::Source source) {
  switch (source) {
    case Verdict::Source::kScript:
      return "script";
    case Verdict::Source::kExitCode:
      return "exit_code";
    case Verdict::Source::kException:
      return "exception";
  }
  return "script";
}

std::optional<int32_t> ExitCodeOf(const RankState& rank) {
  if (rank.exiting_code) return rank.exiting_code;
  if (rank.death && rank.death->exit_known && rank.death->signal == 0) {
    return rank.death->exit_code;
  }
  return std::nullopt;
}

std::optional<Verdict> VerdictOn(const RankState& rank, const VerdictTable* job_rules,
                                 const VerdictTable& table) {
  if (rank.verdict != VerdictAction::kUnspecified && rank.verdict != VerdictAction::kDefault) {
    Verdict v;
    v.action = rank.verdict;
    v.source = Verdict::Source::kScript;
    v.found_by = "hb.verdict";
    v.reason = rank.verdict_reason;
    return v;
  }
  // The job's rule for a key, else trainsupd's.
  const VerdictRule* rule = nullptr;
  bool job_rule = false;
  auto lookup = [&](auto find) {
    job_rule = job_rules != nullptr && (rule = find(*job_rules)) != nullptr;
    if (!job_rule) rule = find(table);
  };
  Verdict::Source source = Verdict::Source::kExitCode;
  if (const std::optional<int32_t> code = ExitCodeOf(rank); code && *code != 0) {
    lookup([&](const VerdictTable& t) { return t.ForExitCode(*code); });
  }
  if (rule == nullptr && !rank.exception_type.empty()) {
    source = Verdict::Source::kException;
    lookup([&](const VerdictTable& t) { return t.ForException(rank.exception_type); });
  }
  if (rule == nullptr || rule->action == VerdictAction::kDefault) return std::nullopt;
  return FromRule(*rule, source, job_rule);
}

}  // namespace trainsup
