#ifndef TRAINSUP_DAEMON_CORE_EARLY_FAILURE_H_
#define TRAINSUP_DAEMON_CORE_EARLY_FAILURE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"

namespace trainsup {

// A node's command that failed before any of its ranks reported: a script
// that cannot import (the helper not on PYTHONPATH), a bad argument, a file
// that is not there, a GPU that does not come up. No rank can be named;
// what the command wrote to stderr says why (its agent sends the lines).
struct EarlyFailure {
  NodeIndex node = kNoNode;
  // Its last stderr lines, the last one the line that names the failure.
  std::vector<std::string> lines;
  // That line without torchrun's "[roleN]:" prefix; "" when it wrote none.
  std::string cause;
  // What tells the same failure again: the cause with numbers, addresses
  // and paths blanked (NormalizeMessage), or the exit status without one.
  std::string signature;
  // The cause names an infrastructure fault (common/failure_text.h), or a
  // crash signal (the OOM killer's SIGKILL, a segfault) ended the command.
  bool infrastructure = false;
  bool crash_signal = false;
};

// `launcher`'s failure on `node` if it is an early one: the command failed
// and no rank of the node was heard from in `job`'s generation. At most
// kMaxStderrExcerptLines of its lines are kept, each as OutputLine keeps
// text. Pure.
std::optional<EarlyFailure> EarlyFailureOf(const Job& job, NodeIndex node,
                                           const LauncherInfo& launcher);

// The job's last early failure, to tell one that comes again.
struct EarlyFailureMemory {
  uint64_t generation = 0;
  std::string signature;
};

// Whose an early failure is.
struct EarlyJudgement {
  enum class Kind {
    // The node's: it names an infrastructure fault, or a crash signal ended
    // the command, on this node alone. Charged to the node.
    kNode,
    // The workload's: the same on every node of the generation (two or
    // more), or the same as in an earlier generation. The job is held with
    // `reason`; no node is charged.
    kWorkload,
    // Not known yet: the first time, on one node. Restarted; no node is
    // charged, and the next one decides.
    kFirst,
  };
  Kind kind = Kind::kFirst;
  std::string reason;  // kWorkload: why it is held, with the command's last lines
};

// Early failures judged since start, by whose they are.
struct EarlyFailureCounts {
  uint64_t node = 0;      // charged to their node
  uint64_t workload = 0;  // held as the workload's
  uint64_t first = 0;     // seen the first time: restarted, nobody charged
};

// Judges `named` (the early failure the crash verdict names) of generation
// `generation`: `early` holds every early failure among the `ran` nodes that
// ran the generation (named's included), `names` their node names by
// position in `early`; `earlier` the job's last early failure. Pure.
EarlyJudgement JudgeEarlyFailure(uint64_t generation, const EarlyFailure& named,
                                 const std::vector<EarlyFailure>& early,
                                 const std::vector<std::string>& names, size_t ran,
                                 const std::optional<EarlyFailureMemory>& earlier);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_EARLY_FAILURE_H_
