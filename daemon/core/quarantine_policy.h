#ifndef TRAINSUP_DAEMON_CORE_QUARANTINE_POLICY_H_
#define TRAINSUP_DAEMON_CORE_QUARANTINE_POLICY_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

struct QuarantineOptions {
  // A node with `after` failures attributed to it within `window` is
  // quarantined. Defaults: 3 within 1h.
  int after = 3;
  absl::Duration window = absl::Hours(1);
  // The policy never quarantines more than this fraction of the known nodes
  // at once (yet always allows one), so that a bad rule (or a bad day) cannot
  // empty the cluster. An operator's quarantine obeys it too unless forced.
  // Default: 0.25.
  double max_fraction = 0.25;
  // A node named by this many restart-elsewhere verdicts (the job's own
  // word that it must not run there: Megatron-LM's exit 16) within `window`
  // is quarantined. Default: 2.
  int restart_elsewhere_after = 2;
};

// What a charge against a node counts toward.
enum class Charge {
  kFailure,           // its failures (QuarantineOptions::after)
  kRestartElsewhere,  // its restart-elsewhere verdicts (restart_elsewhere_after)
};

// Which nodes are quarantined (the one place that says so), and the failures
// that count towards it. Pure; thread-compatible.
class QuarantinePolicy {
 public:
  explicit QuarantinePolicy(QuarantineOptions options) : options_(options) {}

  struct Verdict {
    bool quarantine = false;      // quarantine the node now
    bool skipped_by_cap = false;  // it qualified, but the fraction cap refused
    int failures = 0;             // attributed to it within the window
    std::string reason;           // for the event and the node's record
  };
  // A failure (`what`, e.g. "crash of rank 3 (exit code 1)") was attributed
  // to `node` at `now`, counting toward `charge`. `known_nodes` is the
  // cluster's node count.
  Verdict Attribute(absl::Time now, const std::string& node, absl::string_view what,
                    size_t known_nodes, Charge charge = Charge::kFailure);

  // Puts back a failure from the state store: it counts towards a later
  // verdict, but decides nothing now.
  void Remember(absl::Time time, const std::string& node, absl::string_view what,
                Charge charge = Charge::kFailure);

  void Quarantine(const std::string& node, const std::string& reason);
  // Lifts the quarantine and forgets the node's attributed failures.
  void Unquarantine(const std::string& node);
  bool IsQuarantined(absl::string_view node) const;
  // Why `node` is quarantined; "" when it is not.
  const std::string& ReasonOf(absl::string_view node) const;
  size_t quarantined_count() const { return quarantined_; }
  // Whether the fraction cap allows no further quarantine among `known_nodes`.
  bool AtCap(size_t known_nodes) const { return quarantined_ >= Cap(known_nodes); }
  // Quarantines the cap refused since start.
  uint64_t skipped() const { return skipped_; }

  const QuarantineOptions& options() const { return options_; }

 private:
  using Charges = std::deque<std::pair<absl::Time, std::string>>;  // within the window
  struct NodeState {
    bool quarantined = false;
    std::string reason;
    Charges failures;
    Charges elsewhere;  // restart-elsewhere verdicts
    Charges& of(Charge charge) { return charge == Charge::kFailure ? failures : elsewhere; }
  };
  // How many nodes the policy may hold in quarantine with `known_nodes` nodes.
  size_t Cap(size_t known_nodes) const;

  const QuarantineOptions options_;
  absl::flat_hash_map<std::string, NodeState> nodes_;
  size_t quarantined_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_QUARANTINE_POLICY_H_
