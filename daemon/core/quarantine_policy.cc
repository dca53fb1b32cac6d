#include "daemon/core/quarantine_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainsup {

size_t QuarantinePolicy::Cap(size_t known_nodes) const {
  const double cap = std::floor(options_.max_fraction * static_cast<double>(known_nodes));
  return std::max<size_t>(1, static_cast<size_t>(cap));
}

QuarantinePolicy::Verdict QuarantinePolicy::Attribute(absl::Time now, const std::string& node,
                                                      absl::string_view what,
                                                      size_t known_nodes, Charge charge) {
  NodeState& state = nodes_[node];
  Charges& charges = state.of(charge);
  charges.emplace_back(now, std::string(what));
  while (!charges.empty() && charges.front().first <= now - options_.window) charges.pop_front();
  Verdict verdict;
  verdict.failures = static_cast<int>(charges.size());
  const int after =
      charge == Charge::kFailure ? options_.after : options_.restart_elsewhere_after;
  if (state.quarantined || verdict.failures < after) return verdict;

  std::vector<std::string> whats;
  for (const auto& [time, description] : charges) whats.push_back(description);
  verdict.reason = absl::StrCat(
      verdict.failures,
      charge == Charge::kFailure ? " failures" : " restart-elsewhere verdicts of the job's own",
      " within ", absl::FormatDuration(options_.window), ": ", absl::StrJoin(whats, "; "));
  if (quarantined_count() >= Cap(known_nodes)) {
    verdict.skipped_by_cap = true;
    ++skipped_;
    return verdict;
  }
  verdict.quarantine = true;
  Quarantine(node, verdict.reason);
  return verdict;
}

void QuarantinePolicy::Remember(absl::Time time, const std::string& node, absl::string_view what,
                                Charge charge) {
  Charges& charges = nodes_[node].of(charge);
  charges.emplace_back(time, std::string(what));
  std::sort(charges.begin(), charges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

void QuarantinePolicy::Quarantine(const std::string& node, const std::string& reason) {
  NodeState& state = nodes_[node];
  if (!state.quarantined) ++quarantined_;
  state.quarantined = true;
  state.reason = reason;
}

void QuarantinePolicy::Unquarantine(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  if (it->second.quarantined) --quarantined_;
  it->second.quarantined = false;
  it->second.reason.clear();
  it->second.failures.clear();
  it->second.elsewhere.clear();
}

bool QuarantinePolicy::IsQuarantined(absl::string_view node) const {
  // The common case, without hashing the name: the sweep asks for every
  // node of every job.
  if (quarantined_count() == 0) return false;
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.quarantined;
}

const std::string& QuarantinePolicy::ReasonOf(absl::string_view node) const {
  static const std::string* const kNone = new std::string();
  auto it = nodes_.find(node);
  return it == nodes_.end() ? *kNone : it->second.reason;
}

}  // namespace trainsup
