#ifndef TRAINSUP_SIM_FAILURE_TRACE_H_
#define TRAINSUP_SIM_FAILURE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup::sim {

// What happened to a node, as the supervisor would see it.
enum class FailureKind {
  kCrash,      // a rank died: named by its agent within the crash rule's settle
  kHang,       // a rank stopped progressing: caught by the stall rule
  kNodeLost,   // the host went silent (power, network, maintenance): it leaves the job
  kSlow,       // the node runs slower for a while: stragglers, no restart
  kCorruption, // silent data corruption: found later; checkpoints since are bad
  kLossSpike,  // the loss diverged: roll back ~100 steps (not a node's fault)
};
const char* FailureKindName(FailureKind kind);  // "crash", "hang", ...

// The node of an event that is the workload's, not a node's (a software
// bug, a dependency, a loss spike): "-" in a CSV trace.
constexpr uint32_t kNoNode = UINT32_MAX;

struct FailureEvent {
  double time_seconds = 0;  // since the start of the trace
  uint32_t node = kNoNode;  // physical node, 0..nodes-1, or kNoNode
  FailureKind kind = FailureKind::kCrash;
  std::string cause;        // e.g. "GPU", "software bug"; free text from a file
  // A software bug: a restart does not fix it (it fails again the same way).
  bool deterministic = false;
};

// One published cause of interruptions and how it shows.
struct FailureCause {
  const char* name;
  int count;  // in the source
  FailureKind kind;
  bool deterministic;  // a restart does not fix it
  bool node_fault;     // the node, not the workload, is to blame
};

// The Llama 3 report's 419 unexpected interruptions in 54 days of a
// 16,384-GPU job, by cause (the published counts, which sum to 419).
const std::vector<FailureCause>& Llama3Causes();

struct TraceOptions {
  uint32_t nodes = 2048;  // physical nodes the trace covers (8 GPUs each)
  double days = 54;
  // Llama 3's 419 interruptions are 0.00379 per 8-GPU node per day; 363 of
  // them are the nodes' (hardware, network, maintenance): 363 / (54 days x
  // 2048 nodes) = 0.00328 per node per day, with those causes' proportions.
  double interruptions_per_node_day = 363.0 / (54.0 * 2048.0);
  // The other 56 (software bugs, a dependency) are the workload's: a rate
  // per run, whatever its size (56 in 54 days).
  double workload_interruptions_per_day = 56.0 / 54.0;
  // "Lemon" nodes fail `lemon_factor` times as often as the others; the
  // average rate stays `interruptions_per_node_day`.
  double lemon_fraction = 0.15;
  double lemon_factor = 5;
  // Loss spikes per run of `days`, whatever the size (about 20 in a run).
  double loss_spikes = 20;
  uint64_t seed = 1;
};

// A trace drawn from `options` (Poisson arrivals per node, causes in the
// proportions of Llama3Causes()), in time order.
std::vector<FailureEvent> GenerateTrace(const TraceOptions& options);

// The nodes GenerateTrace made lemons (for tests and reports).
std::vector<uint32_t> LemonNodes(const TraceOptions& options);

// A trace from CSV: a header "time,node,kind" (and optional ",cause" and
// ",deterministic"), then one failure a line: seconds since the start, the
// node index ("-": the workload's), a kind of FailureKindName. Lines in any order (sorted on return); '#' lines and blank
// lines are skipped. InvalidArgument naming the line otherwise.
absl::StatusOr<std::vector<FailureEvent>> ParseTraceCsv(absl::string_view text);

// The CSV form of `trace` (ParseTraceCsv reads it back).
std::string TraceToCsv(const std::vector<FailureEvent>& trace);

}  // namespace trainsup::sim

#endif  // TRAINSUP_SIM_FAILURE_TRACE_H_
