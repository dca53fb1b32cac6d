#include "daemon/core/signals/replica_rule.h"

#include <utility>

namespace trainsup {

bool ReplicaRule::Due(absl::flat_hash_map<uint32_t, int64_t>& last, uint32_t key,
                      int64_t step) const {
  auto [it, inserted] = last.try_emplace(key, step);
  if (inserted) return true;
  if (step - it->second < options_.rearm_steps) return false;
  it->second = step;
  return true;
}

void ReplicaRule::Observe(const ReplicaDisagreement& d) {
  mismatches_ += d.disagreeing;
  ReplicaFinding f;
  f.step = d.step;
  f.group = d.group;
  f.group_ranks = d.group_ranks;
  f.majority = d.majority;
  f.disagreeing = d.disagreeing;
  f.no_majority = d.no_majority;
  if (d.no_majority) {
    if (Due(last_by_group_, d.group, d.step)) found_.push_back(f);
    return;
  }
  // One finding per node, naming its first disagreeing rank.
  for (size_t i = 0; i < d.named.size(); ++i) {
    const RankAt& at = d.named[i];
    bool first_on_node = true;
    for (size_t j = 0; j < i; ++j) first_on_node &= d.named[j].node != at.node;
    if (!first_on_node) continue;
    f.at = at;
    f.on_node = 0;
    for (const RankAt& other : d.named) f.on_node += other.node == at.node ? 1 : 0;
    if (Due(last_by_node_, at.node, d.step)) found_.push_back(f);
  }
}

std::vector<ReplicaFinding> ReplicaRule::Take() {
  std::vector<ReplicaFinding> out;
  out.swap(found_);
  return out;
}

}  // namespace trainsup
