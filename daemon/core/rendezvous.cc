#include "daemon/core/rendezvous.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

constexpr size_t kMaxAddressLength = 253;
constexpr uint32_t kMaxNodeRank = 1 << 20;

bool IsAddressChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_' || c == ':';
}

const RendezvousMember* FindMember(const std::vector<RendezvousMember>& members,
                                   absl::string_view node) {
  for (const RendezvousMember& m : members) {
    if (m.node == node) return &m;
  }
  return nullptr;
}

bool Offers(const RendezvousMember* m) { return m != nullptr && m->offer.has_value(); }

// The nodes named in `ranks` (a rank no node holds left out), sorted.
std::vector<std::string> NodeSet(const std::vector<std::string>& ranks) {
  std::vector<std::string> nodes;
  for (const std::string& n : ranks) {
    if (!n.empty()) nodes.push_back(n);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

std::vector<std::string> NodeSet(const std::vector<RendezvousMember>& members) {
  std::vector<std::string> nodes;
  for (const RendezvousMember& m : members) nodes.push_back(m.node);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace

absl::Status CheckRendezvousOffer(const RendezvousOffer& offer) {
  if (offer.address.empty() || offer.address.size() > kMaxAddressLength ||
      !std::all_of(offer.address.begin(), offer.address.end(), IsAddressChar)) {
    return absl::InvalidArgumentError(
        "rendezvous address must be 1..253 characters of [A-Za-z0-9._:-]");
  }
  if (offer.port == 0 || offer.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous port ", offer.port, " is not in 1..65535"));
  }
  if (offer.node_rank >= kMaxNodeRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous node rank ", offer.node_rank, " is not below ", kMaxNodeRank));
  }
  return absl::OkStatus();
}

const RendezvousDecision* RendezvousPlan::Decide(uint64_t generation,
                                                 const std::vector<RendezvousMember>& members,
                                                 bool previous_met) {
  const std::optional<RendezvousDecision> previous = std::move(current_);
  current_.reset();
  const RendezvousMember* first = nullptr;
  for (const RendezvousMember& m : members) {
    if (m.offer && first == nullptr) first = &m;
  }
  if (first == nullptr) return nullptr;

  RendezvousDecision d;
  d.generation = generation;
  d.kind = first->offer->kind;
  d.previous_host = previous ? previous->host : std::string();
  const bool same_nodes = previous && NodeSet(previous->ranks) == NodeSet(members);
  if (d.kind == RendezvousKind::kStatic && previous && previous->as_written && previous_met &&
      same_nodes) {
    d.as_written = true;  // as it met before: the commands' own arguments
    d.host = previous->host;
    d.address = previous->address;
    d.port = previous->port;
    d.ranks = previous->ranks;
    current_ = std::move(d);
    return &*current_;
  }

  // The host: stay where the job met, move when the host is gone or the
  // job could not meet there.
  const RendezvousMember* host = nullptr;
  const RendezvousMember* before = previous ? FindMember(members, previous->host) : nullptr;
  if (Offers(before) && previous_met) host = before;
  for (const RendezvousMember& m : members) {
    if (host == nullptr && m.offer && &m != before) host = &m;
  }
  if (host == nullptr) host = before;  // the only one that offers
  d.host = host->node;
  d.address = host->offer->address;
  d.port = host->offer->port;

  if (same_nodes && previous->host == d.host && !previous->as_written) {
    d.ranks = previous->ranks;
  } else {
    d.ranks.push_back(d.host);
    if (previous) {
      for (const std::string& n : previous->ranks) {
        if (!n.empty() && n != d.host && FindMember(members, n) != nullptr) d.ranks.push_back(n);
      }
    }
    for (const RendezvousMember& m : members) {
      if (std::find(d.ranks.begin(), d.ranks.end(), m.node) == d.ranks.end()) {
        d.ranks.push_back(m.node);
      }
    }
  }
  d.renumbered = previous && previous->ranks != d.ranks;
  current_ = std::move(d);
  return &*current_;
}

bool RendezvousPlan::Join(uint64_t generation, const RendezvousMember& member) {
  if (!member.offer) return false;
  const RendezvousOffer& offer = *member.offer;
  if (current_ && current_->generation == generation) {
    RendezvousDecision& d = *current_;
    if (std::find(d.ranks.begin(), d.ranks.end(), member.node) != d.ranks.end()) return false;
    if (!d.as_written) {
      d.ranks.push_back(member.node);  // a late node meets where the others do
      return false;
    }
    // As written: the node takes the rank its command names.
    if (d.ranks.size() <= offer.node_rank) d.ranks.resize(offer.node_rank + 1);
    if (!d.ranks[offer.node_rank].empty()) return false;  // two say the same rank: theirs to find
    d.ranks[offer.node_rank] = member.node;
    if (offer.node_rank == 0) d.host = member.node;
    return false;
  }
  RendezvousDecision d;
  d.generation = generation;
  d.kind = offer.kind;
  d.previous_host = current_ ? current_->host : std::string();
  if (offer.kind == RendezvousKind::kC10d) {
    d.host = member.node;
    d.address = offer.address;
    d.port = offer.port;
    d.ranks = {member.node};
  } else {
    d.as_written = true;
    d.ranks.resize(offer.node_rank + 1);
    d.ranks[offer.node_rank] = member.node;
    if (offer.node_rank == 0) d.host = member.node;
  }
  const bool decided = !d.as_written;
  current_ = std::move(d);
  return decided;
}

std::optional<RendezvousSpec> RendezvousPlan::For(uint64_t generation,
                                                  absl::string_view node) const {
  if (!current_ || current_->generation != generation || current_->as_written) {
    return std::nullopt;
  }
  const RendezvousDecision& d = *current_;
  auto it = std::find(d.ranks.begin(), d.ranks.end(), node);
  if (it == d.ranks.end()) return std::nullopt;
  RendezvousSpec spec;
  spec.host_node = d.host;
  spec.address = d.address;
  spec.port = d.port;
  spec.node_rank = static_cast<uint32_t>(it - d.ranks.begin());
  return spec;
}

}  // namespace trainsup
