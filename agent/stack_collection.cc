#include "agent/stack_collection.h"

#include <algorithm>

namespace trainsup {

StackCollection::StackCollection(uint64_t generation,
                                 const std::vector<ProcessObservation>& ranks)
    : generation_(generation) {
  for (const ProcessObservation& o : ranks) {
    const v1::RankProcess& p = o.process;
    if (p.generation() != generation) continue;
    Rank& r = ranks_[p.rank()];
    r.local_rank = p.local_rank();
    r.pid = p.pid();
    r.asked = p.alive() && o.stack_signal != 0;
    if (r.asked) targets_.push_back(Target{p.rank(), static_cast<pid_t>(p.pid()), o.stack_signal});
  }
}

void StackCollection::Asked(uint32_t rank, int64_t size_before, bool signalled) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.asked) return;
  Rank& r = it->second;
  r.size_before = std::max<int64_t>(0, size_before);
  r.size = r.size_before;
  r.can_answer = signalled;
}

void StackCollection::Observe(uint32_t rank, int64_t size, absl::Duration now) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.can_answer) return;
  Rank& r = it->second;
  // Shorter than before the signal: the file was made anew (the rank
  // restarted its helper); all of it is new.
  if (size < r.size_before) r.size_before = 0;
  if (size != r.size) {
    r.size = size;
    r.changed_at = now;
  }
}

void StackCollection::AskedDump(uint32_t rank, int64_t stamp_before, bool asked) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  Rank& r = it->second;
  r.dump_asked = asked;
  r.dump_before = stamp_before;
  r.dump_stamp = stamp_before;
}

void StackCollection::ObserveDump(uint32_t rank, int64_t stamp, absl::Duration now) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.dump_asked) return;
  Rank& r = it->second;
  if (stamp != r.dump_stamp) {
    r.dump_stamp = stamp;
    r.dump_changed_at = now;
  }
}

std::vector<uint32_t> StackCollection::PendingDumps(absl::Duration now) const {
  std::vector<uint32_t> pending;
  for (const auto& [rank, r] : ranks_) {
    if (!r.dump_asked) continue;
    if (Dumped(r) && now - r.dump_changed_at >= kStackQuietTime) continue;
    pending.push_back(rank);
  }
  return pending;
}

std::vector<uint32_t> StackCollection::Pending(absl::Duration now) const {
  std::vector<uint32_t> pending;
  for (const auto& [rank, r] : ranks_) {
    if (!r.can_answer) continue;
    if (Answered(r) && now - r.changed_at >= kStackQuietTime) continue;
    pending.push_back(rank);
  }
  return pending;
}

std::vector<StackCollection::Result> StackCollection::Results() const {
  std::vector<Result> results;
  results.reserve(ranks_.size());
  for (const auto& [rank, r] : ranks_) {
    Result result;
    result.rank = rank;
    result.local_rank = r.local_rank;
    result.pid = r.pid;
    result.answered = r.can_answer && Answered(r);
    if (result.answered) {
      result.offset = r.size_before;
      result.length = std::min(r.size - r.size_before, kMaxStackBytes);
    }
    result.dumped = Dumped(r);
    results.push_back(result);
  }
  return results;
}

std::string StackText(absl::string_view bytes) {
  std::string text(bytes);
  for (char& c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u == '\n' || u == '\t') continue;
    if (u < 0x20 || u >= 0x7f) c = '?';
  }
  return text;
}

}  // namespace trainsup
