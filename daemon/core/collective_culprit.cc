#include "daemon/core/collective_culprit.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainsup {
// Helpers in a namespace of their own: the core is a unity build, where
// anonymous namespaces of neighbouring files share one translation unit.
namespace collective_culprit_internal {
namespace {

constexpr size_t kMaxRanges = 8;
// The most ranks a job is assumed to have when only world_size says which.
constexpr uint32_t kMaxWorldSize = 1 << 22;

// One group as all the dumps show it.
struct GroupView {
  std::string name;
  std::string desc;
  std::vector<uint32_t> members;                   // ascending
  std::map<uint32_t, const GroupRecord*> by_rank;  // ranks whose dumps have the group
};

// A finding before the choice between groups (the header says how).
struct Candidate {
  CollectiveCulprit culprit;
  int tier = 0;
  int64_t lag = 0;
};

// How far back a candidate explains the hang; lower explains more.
enum Tier {
  kRootCause = 0,       // its own dumps; no culprit is held in another group
  kPartly = 1,          // its own dumps; some culprits are held in another group
  kConsequence = 2,     // its own dumps; every culprit is held in another group
  kByAbsence = 3,       // only ranks without dumps can be short of it
  kAllWaiting = 4,      // every rank reached it and waits
  kNothingPending = 5,  // every rank reached it and completed it
};

std::string GroupLabel(const GroupView& g) {
  if (g.desc.empty()) return absl::StrCat("pg ", g.name);
  return absl::StrCat("pg ", g.name, " (", g.desc, ")");
}

std::string CollectiveLabel(absl::string_view op, int64_t seq) {
  return absl::StrCat(op.empty() ? "collective" : op, " #", seq);
}

// "waits" for one rank, "wait" for several.
absl::string_view Verb(const std::vector<uint32_t>& ranks, absl::string_view one,
                       absl::string_view many) {
  return ranks.size() == 1 ? one : many;
}

std::string WithoutDumpNote(const std::vector<uint32_t>& without) {
  if (without.empty()) return "";
  return absl::StrCat("; ", RankRanges(without), " gave no dump (weaker evidence: ",
                      without.size() == 1 ? "it" : "they", " may be short of it too)");
}

// Group names in their numbers' order when they are numbers.
bool NameBefore(const std::string& a, const std::string& b) {
  uint64_t x = 0;
  uint64_t y = 0;
  const bool a_number = absl::SimpleAtoi(a, &x);
  const bool b_number = absl::SimpleAtoi(b, &y);
  if (a_number != b_number) return a_number;
  if (a_number && x != y) return x < y;
  return a < b;
}

std::map<std::string, GroupView> ViewGroups(const std::map<uint32_t, FlightRecord>& dumps,
                                            uint32_t world_size) {
  std::map<std::string, GroupView> views;
  std::map<std::string, std::set<uint32_t>> members;
  for (const auto& [rank, record] : dumps) {
    for (const GroupRecord& g : record.groups) {
      GroupView& view = views[g.name];
      view.name = g.name;
      if (view.desc.empty()) view.desc = g.desc;
      view.by_rank.emplace(rank, &g);
      members[g.name].insert(g.ranks.begin(), g.ranks.end());
    }
  }
  for (auto& [name, view] : views) {
    std::set<uint32_t>& m = members[name];
    for (const auto& [rank, group] : view.by_rank) m.insert(rank);
    // No dump lists the default group's ranks (a writer without
    // pg_config): they are the job's.
    const bool default_group = view.desc == "default_pg" || name == "0";
    if (default_group && world_size > 0 && m.size() < world_size) {
      for (uint32_t r = 0; r < std::min(world_size, kMaxWorldSize); ++r) m.insert(r);
    }
    view.members.assign(m.begin(), m.end());
  }
  return views;
}

// The groups in which each rank has an operation pending (enqueued, not
// completed): where it is held.
std::map<uint32_t, std::set<std::string>> PendingGroups(
    const std::map<uint32_t, FlightRecord>& dumps) {
  std::map<uint32_t, std::set<std::string>> pending;
  for (const auto& [rank, record] : dumps) {
    for (const GroupRecord& g : record.groups) {
      const bool collective = g.collectives.last_enqueued > g.collectives.last_completed;
      const bool p2p =
          !g.last_p2p.empty() && g.last_p2p.back().state != CollectiveState::kCompleted;
      if (collective || p2p) pending[rank].insert(g.name);
    }
  }
  return pending;
}

// A culprit held in another group's operation is short of this one as a
// consequence: the finding explains less.
int DumpTier(const std::vector<uint32_t>& culprits, const std::string& group,
             const std::map<uint32_t, std::set<std::string>>& pending) {
  size_t held = 0;
  for (uint32_t rank : culprits) {
    const auto it = pending.find(rank);
    if (it != pending.end() && std::any_of(it->second.begin(), it->second.end(),
                                           [&](const std::string& g) { return g != group; })) {
      ++held;
    }
  }
  return held == 0 ? kRootCause : held < culprits.size() ? kPartly : kConsequence;
}

// The name of the collective `seq` of a group: the waiting ranks' entries
// first (theirs are the newest), then anyone's.
std::string OpAt(const GroupView& view, int64_t seq, const std::vector<uint32_t>& waiting) {
  auto search = [&](const GroupRecord& g) -> std::optional<std::string> {
    for (auto it = g.last_collectives.rbegin(); it != g.last_collectives.rend(); ++it) {
      if (it->seq == seq) return it->op;
    }
    return std::nullopt;
  };
  for (uint32_t rank : waiting) {
    const auto it = view.by_rank.find(rank);
    if (it == view.by_rank.end()) continue;
    if (auto op = search(*it->second)) return *op;
  }
  for (const auto& [rank, g] : view.by_rank) {
    if (auto op = search(*g)) return *op;
  }
  return "";
}

std::optional<Candidate> CollectiveCandidate(
    const GroupView& view, const std::map<uint32_t, FlightRecord>& dumps,
    const std::map<uint32_t, std::set<std::string>>& pending) {
  std::map<uint32_t, std::pair<int64_t, int64_t>> progress;  // rank -> (entered, completed)
  std::vector<uint32_t> without;
  int64_t n = -1;
  for (uint32_t rank : view.members) {
    if (dumps.count(rank) == 0) {
      without.push_back(rank);
      continue;
    }
    // A dump without the group: its rank never entered a collective of it.
    const auto it = view.by_rank.find(rank);
    const CollectiveProgress p =
        it == view.by_rank.end() ? CollectiveProgress{} : it->second->collectives;
    progress[rank] = {p.last_enqueued, p.last_completed};
    n = std::max(n, p.last_enqueued);
  }
  if (n < 0) return std::nullopt;
  Candidate c;
  CollectiveCulprit& out = c.culprit;
  int64_t culprit_entered = -1;
  for (const auto& [rank, p] : progress) {
    if (p.first == n && p.second < n) out.waiting.push_back(rank);
    if (p.first < n) {
      out.not_entered.push_back(rank);
      culprit_entered = std::max(culprit_entered, p.first);
    }
  }
  out.pg = view.name;
  out.pg_desc = view.desc;
  out.seq = n;
  out.op = OpAt(view, n, out.waiting);
  out.without_dump = without;
  const std::string what = absl::StrCat(CollectiveLabel(out.op, n), " of ", GroupLabel(view));
  if (out.waiting.empty()) {
    // Everyone at N completed it. A rank short of N then dumped earlier
    // than the others: no finding either way.
    if (!out.not_entered.empty()) return std::nullopt;
    out.evidence = CulpritEvidence::kUndetermined;
    c.tier = kNothingPending;
    out.text = absl::StrCat("every rank reached ", what,
                            " and completed it; undetermined: the dumps show nothing pending",
                            without.empty() ? "" : absl::StrCat("; ", RankRanges(without),
                                                                " gave no dump"));
    return c;
  }
  if (!out.not_entered.empty()) {
    out.evidence = CulpritEvidence::kDump;
    c.tier = DumpTier(out.not_entered, view.name, pending);
    c.lag = n - culprit_entered;
    out.text = absl::StrCat(RankRanges(out.not_entered), " never entered ", what, " that ",
                            RankRanges(out.waiting), " ", Verb(out.waiting, "waits", "wait"),
                            " in", WithoutDumpNote(without));
  } else if (!without.empty()) {
    out.evidence = CulpritEvidence::kAbsence;
    c.tier = kByAbsence;
    out.text = absl::StrCat(RankRanges(without), " gave no dump; ", RankRanges(out.waiting),
                            " reached ", what, " and ", Verb(out.waiting, "waits", "wait"),
                            " in it: suspected by absence only (weaker evidence)");
  } else {
    out.evidence = CulpritEvidence::kUndetermined;
    c.tier = kAllWaiting;
    out.text = absl::StrCat("every rank reached ", what,
                            " and waits in it; undetermined: none stayed out (the collective "
                            "itself hangs: network, NCCL or a GPU)");
  }
  return c;
}

// The global rank at a group rank; none when the group's ranks are unknown.
std::optional<uint32_t> GlobalRank(const GroupView& view, int32_t group_rank) {
  if (group_rank < 0 || static_cast<size_t>(group_rank) >= view.members.size()) {
    return std::nullopt;
  }
  return view.members[group_rank];
}

// A pending send or receive of `rank`'s whose other end is `peer`.
bool PendingTowards(const GroupView& view, const GroupRecord& g, uint32_t peer) {
  return std::any_of(g.last_p2p.begin(), g.last_p2p.end(), [&](const CollectiveOp& op) {
    return op.state != CollectiveState::kCompleted && GlobalRank(view, op.peer) == peer;
  });
}

std::optional<Candidate> P2pCandidate(const GroupView& view,
                                      const std::map<uint32_t, FlightRecord>& dumps,
                                      const std::map<uint32_t, std::set<std::string>>& pending) {
  std::set<uint32_t> culprits;
  std::set<uint32_t> without;
  std::set<uint32_t> waiting;
  const CollectiveOp* first = nullptr;
  for (const auto& [rank, g] : view.by_rank) {
    if (g->last_p2p.empty()) continue;
    const CollectiveOp& op = g->last_p2p.back();
    if (op.state == CollectiveState::kCompleted) continue;
    const std::optional<uint32_t> peer = GlobalRank(view, op.peer);
    if (!peer || *peer == rank) continue;
    if (dumps.count(*peer) == 0) {
      without.insert(*peer);
    } else {
      const auto theirs = view.by_rank.find(*peer);
      if (theirs != view.by_rank.end() && PendingTowards(view, *theirs->second, rank)) continue;
      culprits.insert(*peer);
    }
    waiting.insert(rank);
    if (first == nullptr) first = &op;
  }
  if (first == nullptr) return std::nullopt;
  Candidate c;
  CollectiveCulprit& out = c.culprit;
  out.pg = view.name;
  out.pg_desc = view.desc;
  out.p2p = true;
  out.seq = first->seq;
  out.op = first->op;
  out.not_entered.assign(culprits.begin(), culprits.end());
  out.waiting.assign(waiting.begin(), waiting.end());
  out.without_dump.assign(without.begin(), without.end());
  // A send or receive is one operation behind: a lag of 1.
  c.lag = 1;
  const std::string what =
      absl::StrCat(out.op, " (p2p #", out.seq, " of ", GroupLabel(view), ")");
  if (!out.not_entered.empty()) {
    out.evidence = CulpritEvidence::kDump;
    c.tier = DumpTier(out.not_entered, view.name, pending);
    out.text = absl::StrCat(RankRanges(out.not_entered), " never entered the other end of ", what,
                            " that ", RankRanges(out.waiting), " ",
                            Verb(out.waiting, "waits", "wait"), " in",
                            WithoutDumpNote(out.without_dump));
  } else {
    out.evidence = CulpritEvidence::kAbsence;
    c.tier = kByAbsence;
    out.text = absl::StrCat(RankRanges(out.without_dump), " gave no dump; ",
                            RankRanges(out.waiting), " ", Verb(out.waiting, "waits", "wait"),
                            " in ", what, " for it: suspected by absence only (weaker evidence)");
  }
  return c;
}

bool Explains(const Candidate& a, const Candidate& b) {
  if (a.tier != b.tier) return a.tier < b.tier;
  if (a.lag != b.lag) return a.lag < b.lag;
  if (a.culprit.p2p != b.culprit.p2p) return !a.culprit.p2p;
  return NameBefore(a.culprit.pg, b.culprit.pg);
}

}  // namespace
}  // namespace collective_culprit_internal

const char* CulpritEvidenceName(CulpritEvidence evidence) {
  switch (evidence) {
    case CulpritEvidence::kNoDumps:
      return "no_dumps";
    case CulpritEvidence::kUndetermined:
      return "undetermined";
    case CulpritEvidence::kDump:
      return "dump";
    case CulpritEvidence::kAbsence:
      return "absence";
  }
  return "no_dumps";
}

std::string RankRanges(const std::vector<uint32_t>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  size_t ranges = 0;
  size_t i = 0;
  while (i < ranks.size()) {
    if (ranges == collective_culprit_internal::kMaxRanges) {
      absl::StrAppend(&out, " and ", ranks.size() - i, " more");
      break;
    }
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    absl::StrAppend(&out, ranges == 0 ? "" : ", ", ranks[i]);
    if (j > i) absl::StrAppend(&out, "-", ranks[j]);
    ++ranges;
    i = j + 1;
  }
  return out;
}

CollectiveCulprit FindCollectiveCulprit(const std::map<uint32_t, FlightRecord>& dumps,
                                        uint32_t world_size) {
  using collective_culprit_internal::Candidate;
  using collective_culprit_internal::GroupView;
  CollectiveCulprit none;
  if (dumps.empty()) {
    none.text = "no flight recorder dump from any rank: undetermined";
    return none;
  }
  const std::map<std::string, GroupView> views =
      collective_culprit_internal::ViewGroups(dumps, world_size);
  const std::map<uint32_t, std::set<std::string>> pending =
      collective_culprit_internal::PendingGroups(dumps);
  std::optional<Candidate> best;
  auto consider = [&](std::optional<Candidate> c) {
    if (c && (!best || collective_culprit_internal::Explains(*c, *best))) best = std::move(c);
  };
  for (const auto& [name, view] : views) {
    consider(collective_culprit_internal::CollectiveCandidate(view, dumps, pending));
    consider(collective_culprit_internal::P2pCandidate(view, dumps, pending));
  }
  if (best) return best->culprit;
  none.evidence = CulpritEvidence::kUndetermined;
  none.text = "the dumps show no collective of any group: undetermined";
  return none;
}

}  // namespace trainsup
