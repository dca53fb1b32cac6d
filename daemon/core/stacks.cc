#include "daemon/core/stacks.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

// "Thread 0x00007f..." -> "Thread 0x?": the same frames in two processes
// differ only by thread ids.
std::string BlankHex(absl::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    if (line[i] == '0' && i + 1 < line.size() && (line[i + 1] == 'x' || line[i + 1] == 'X')) {
      size_t j = i + 2;
      while (j < line.size() && absl::ascii_isxdigit(static_cast<unsigned char>(line[j]))) ++j;
      out += "0x?";
      i = j;
      continue;
    }
    out += line[i++];
  }
  return out;
}

bool StartsThread(absl::string_view line) {
  return absl::StartsWith(line, "Thread ") || absl::StartsWith(line, "Current thread ");
}

}  // namespace

std::string StackSignature(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  // The last thread block: the main thread (faulthandler lists the newest
  // thread first).
  size_t start = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (StartsThread(lines[i])) start = i + 1;
  }
  std::string signature;
  for (size_t i = start; i < lines.size(); ++i) {
    absl::string_view line = absl::StripAsciiWhitespace(lines[i]);
    if (line.empty()) continue;
    signature += BlankHex(line);
    signature += '\n';
  }
  return signature;
}

std::vector<StackGroup> GroupStacks(const JobStacks& stacks) {
  std::vector<StackGroup> groups;
  absl::flat_hash_map<std::string, size_t> by_signature;
  for (const auto& [rank, stack] : stacks.by_rank) {  // ascending rank
    if (!stack.answered) continue;
    const std::string signature = StackSignature(stack.text);
    auto [it, added] = by_signature.emplace(signature, groups.size());
    if (added) {
      groups.emplace_back();
      groups.back().stack = stack.text;
    }
    StackGroup& g = groups[it->second];
    g.ranks.push_back(rank);
    g.nodes.push_back(stack.node);
    if (stacks.culprit == rank) g.culprit = true;
  }
  std::stable_sort(groups.begin(), groups.end(), [](const StackGroup& a, const StackGroup& b) {
    return a.ranks.size() < b.ranks.size();
  });
  return groups;
}

std::vector<uint32_t> UnansweredRanks(const JobStacks& stacks) {
  std::vector<uint32_t> out;
  for (const auto& [rank, stack] : stacks.by_rank) {
    if (!stack.answered) out.push_back(rank);
  }
  return out;
}

JobStacks& StackShelf::For(uint64_t generation, absl::Time now, uint64_t event_id,
                           std::optional<uint32_t> culprit) {
  if (sets_.empty() || sets_.back().generation != generation) {
    sets_.emplace_back();
    JobStacks& set = sets_.back();
    set.generation = generation;
    set.time = now;
    set.event_id = event_id;
    set.culprit = culprit;
    if (sets_.size() > capacity_) sets_.pop_front();
  }
  return sets_.back();
}

const JobStacks* StackShelf::Find(uint64_t generation) const {
  if (sets_.empty()) return nullptr;
  if (generation == 0) return &sets_.back();
  for (const JobStacks& set : sets_) {
    if (set.generation == generation) return &set;
  }
  return nullptr;
}

}  // namespace trainsup
