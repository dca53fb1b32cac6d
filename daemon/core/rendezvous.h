#ifndef TRAINSUP_DAEMON_CORE_RENDEZVOUS_H_
#define TRAINSUP_DAEMON_CORE_RENDEZVOUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// torchrun's rendezvous, as trainsupd can move it.
enum class RendezvousKind {
  kC10d,    // --rdzv_backend=c10d: a store in one node's torchrun
  kStatic,  // the static rendezvous: --master_addr, --master_port, --node_rank
};

// What a node's agent offers for hosting its job's rendezvous (its hello;
// agent.proto: RendezvousOffer).
struct RendezvousOffer {
  RendezvousKind kind = RendezvousKind::kC10d;
  std::string address;  // how its peers reach the node
  uint32_t port = 0;    // reserved on the node by its agent
  uint32_t node_rank = 0;  // kStatic: the command's own --node_rank
};

// OK, or InvalidArgument saying what is wrong: an address of 1..253
// characters of [A-Za-z0-9._:-], a port in 1..65535, a node rank below 2^20.
absl::Status CheckRendezvousOffer(const RendezvousOffer& offer);

// Where one generation meets, as one node is told it (agent.proto:
// Rendezvous).
struct RendezvousSpec {
  std::string host_node;
  std::string address;
  uint32_t port = 0;
  uint32_t node_rank = 0;  // this node's; the host's is 0
};

// A node of a generation, as the choice of its rendezvous sees it.
struct RendezvousMember {
  std::string node;
  std::optional<RendezvousOffer> offer;  // unset: its agent leaves it to the command
};

// Where one generation of a job meets.
struct RendezvousDecision {
  uint64_t generation = 0;
  RendezvousKind kind = RendezvousKind::kC10d;
  // The node whose torchrun hosts the store ("" while a static generation
  // run as written has not heard from its node 0), and how it is reached
  // (as written: the commands' own address and port, unknown here).
  std::string host;
  std::string address;
  uint32_t port = 0;
  // The nodes by node rank: ranks[0] is the host ("" for a rank no node
  // holds, in a static generation run as written).
  std::vector<std::string> ranks;
  // A static generation the agents launched on their own (the first): the
  // commands' own --master_addr, --master_port and --node_rank apply.
  bool as_written = false;
  // The previous generation's host ("" when there was none), and whether
  // the node ranks differ from the previous generation's.
  std::string previous_host;
  bool renumbered = false;

  bool moved() const { return !previous_host.empty() && previous_host != host; }
};

// Decides where each generation of one job meets (docs/recovery.md, "Where
// a generation meets"): the node whose torchrun hosts the rendezvous store,
// the port its agent offered, and each node's rank. Pure; thread-compatible.
class RendezvousPlan {
 public:
  RendezvousPlan() = default;
  RendezvousPlan(const RendezvousPlan&) = delete;
  RendezvousPlan& operator=(const RendezvousPlan&) = delete;

  // Decides where `generation`, started by the supervisor on `members` (in
  // the order they joined the job), meets. The host: the previous
  // generation's when it is still a member that offers to host, unless that
  // generation never met (`previous_met` false: no rank of it reported)
  // and another member offers; else the first member that offers. Node
  // ranks: the previous generation's while the nodes and the host are the
  // same, else fresh: the host 0, then the others in their previous order,
  // newcomers last in join order. A static generation runs as written
  // (nothing decided) while its nodes are those of a previous generation
  // run as written that met. Returns nullptr, and nothing is decided for
  // `generation`, when no member offers (their agents leave the rendezvous
  // to the commands).
  const RendezvousDecision* Decide(uint64_t generation, const std::vector<RendezvousMember>& members,
                                   bool previous_met);

  // `member` launches into `generation` on its own (an agent's welcome: the
  // first generation, a job run again, a node joining late). It joins the
  // generation's rendezvous; the first to join a c10d generation hosts it.
  // A static generation so begun runs as written (the node whose own
  // --node_rank is 0 is its host; its address and port are the commands'
  // own). Returns true when this decided where a c10d generation meets.
  bool Join(uint64_t generation, const RendezvousMember& member);

  // What `node` is told for `generation`; nullopt when its command's own
  // arguments apply (nothing decided, a static generation run as written,
  // or the node has no rank in it).
  std::optional<RendezvousSpec> For(uint64_t generation, absl::string_view node) const;

  // The latest generation's decision, if any.
  const std::optional<RendezvousDecision>& current() const { return current_; }

 private:
  std::optional<RendezvousDecision> current_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RENDEZVOUS_H_
