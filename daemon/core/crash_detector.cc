#include "daemon/core/crash_detector.h"

#include <map>

namespace trainsup {
namespace {

// One rank's failure: when, and how its process ended if it did.
std::optional<RankDeath> FailureOf(const RankState& r) {
  if (r.death && r.death->failed()) return r.death;  // dated at a reported failure if earlier
  if (!r.exception_time) return std::nullopt;
  // Reported a failure (an exception, or an exit with a non-zero code) and
  // still tearing down. An exit without a known code (or with 0) fails only
  // when the process ends badly.
  const bool exiting_badly = r.exiting_code && *r.exiting_code != 0;
  if (r.exception_type.empty() && !exiting_badly) return std::nullopt;
  RankDeath failure;
  failure.time = *r.exception_time;
  return failure;
}

// The failures of a generation, split by what they say of the fault.
struct Failures {
  std::optional<uint32_t> first_own;  // earliest that failed on its own
  std::optional<uint32_t> first_victim;
  std::map<uint32_t, RankDeath> by_rank;
  uint32_t victims = 0;
  uint32_t still_running = 0;  // seen alive, nothing reported
  std::map<NodeIndex, std::vector<uint32_t>> unseen;  // ranks whose liveness is unknown
};

// Earliest first; at equal times the lower rank (a stable choice).
bool Earlier(const Failures& f, uint32_t a, std::optional<uint32_t> b) {
  return !b || f.by_rank.at(a).time < f.by_rank.at(*b).time;
}

Failures Collect(const Job& job, const absl::flat_hash_set<NodeIndex>& silent_nodes) {
  Failures f;
  for (const auto& [i, r] : job.ranks()) {
    if (!r.seen) continue;
    std::optional<RankDeath> failure = FailureOf(r);
    if (!failure) {
      if (silent_nodes.contains(r.node)) {
        f.unseen[r.node].push_back(i);
      } else if (r.liveness == Liveness::kAlive) {
        ++f.still_running;
      }
      continue;
    }
    f.by_rank[i] = *failure;
    const FailureClass c = ClassifyRankFailure(r);
    if (c == FailureClass::kCommunication || c == FailureClass::kStopped) {
      ++f.victims;
      if (Earlier(f, i, f.first_victim)) f.first_victim = i;
    } else if (Earlier(f, i, f.first_own)) {
      f.first_own = i;
    }
  }
  return f;
}

CrashVerdict RankVerdict(const Job& job, const Failures& f, uint32_t rank, CrashVerdict::Kind kind) {
  CrashVerdict v;
  v.kind = kind;
  v.rank = rank;
  const RankState& r = job.rank(rank);
  v.node = r.node;
  v.death = f.by_rank.at(rank);
  v.failure_class = ClassifyRankFailure(r);
  v.failed_ranks = static_cast<uint32_t>(f.by_rank.size());
  v.victims = f.victims;
  return v;
}

}  // namespace

std::optional<CrashVerdict> CrashDetector::Check(const Job& job, absl::Time first_heard,
                                                 absl::Time now,
                                                 const std::optional<FailedLauncher>& failed,
                                                 const absl::flat_hash_set<NodeIndex>& silent_nodes) const {
  if (first_heard == absl::InfinitePast() || now - first_heard < options_.settle) {
    return std::nullopt;
  }
  if (!(failed || HasFailure(job))) return std::nullopt;
  const Failures f = Collect(job, silent_nodes);
  if (f.first_own) return RankVerdict(job, f, *f.first_own, CrashVerdict::Kind::kRank);
  if (!f.unseen.empty() && f.victims > 0) {
    // Only victims: the cause is where the supervisor cannot see. The node
    // with the most unseen ranks (the lowest index among equals).
    auto lost = f.unseen.begin();
    for (auto it = f.unseen.begin(); it != f.unseen.end(); ++it) {
      if (it->second.size() > lost->second.size()) lost = it;
    }
    CrashVerdict v;
    v.kind = CrashVerdict::Kind::kNodeLost;
    v.node = lost->first;
    v.lost_ranks = lost->second;
    v.failed_ranks = static_cast<uint32_t>(f.by_rank.size());
    v.victims = f.victims;
    v.first_victim = f.first_victim;
    v.death.time = f.by_rank.at(*f.first_victim).time;
    return v;
  }
  if (f.first_victim && f.still_running > 0 && now - first_heard < options_.culprit_wait) {
    return std::nullopt;  // the rank that failed on its own may still be tearing down
  }
  if (f.first_victim) return RankVerdict(job, f, *f.first_victim, CrashVerdict::Kind::kNoCulprit);
  if (!failed) return std::nullopt;
  // The command failed without a rank failure to name: name its node.
  CrashVerdict v;
  v.kind = CrashVerdict::Kind::kLauncher;
  v.node = failed->node;
  v.death.time = first_heard;
  v.death.exit_known = true;
  v.death.exit_code = failed->launcher.exit_code;
  v.death.signal = failed->launcher.signal;
  return v;
}

}  // namespace trainsup
