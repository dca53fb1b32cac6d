#ifndef TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "daemon/core/failure_classifier.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"

namespace trainsup {

struct CrashOptions {
  // After the first failure is heard of, wait this long for the other
  // agents' reports before judging: peers die within ~0.2s of each other and
  // each agent reports every --report-interval. Default: 1s.
  absl::Duration settle = absl::Seconds(1);
  // While every rank that failed so far is a victim (a peer's communication
  // error, or stopped from outside) and some rank still runs, wait up to this
  // long after the first failure was heard for the rank that failed on its
  // own: a rank that called sys.exit can take seconds to tear down after its
  // peers already raised. Default: 10s.
  absl::Duration culprit_wait = absl::Seconds(10);
};

// A node's command (torchrun) that exited non-zero in the job's generation.
struct FailedLauncher {
  NodeIndex node = kNoNode;
  LauncherInfo launcher;
};

struct CrashVerdict {
  enum class Kind {
    kRank,       // `rank` is the first to fail on its own
    kLauncher,   // a node's command failed with no rank failure to name
    kNodeLost,   // only victims failed and the ranks of `node` cannot be seen
    kNoCulprit,  // only victims failed and every rank can be seen
  };
  Kind kind = Kind::kRank;
  // kRank: the culprit; kNoCulprit: the first victim.
  std::optional<uint32_t> rank;
  // kRank: the culprit's node; kLauncher: the command's; kNodeLost: the lost one.
  NodeIndex node = kNoNode;
  // The failure: when (source time) and the exit status if the process
  // ended. kLauncher: the command's status, dated when first heard.
  RankDeath death;
  FailureClass failure_class = FailureClass::kOwn;  // of the named rank
  uint32_t failed_ranks = 0;  // ranks that failed (a failed death, or a reported failure)
  uint32_t victims = 0;       // of them, victims of a peer or stopped from outside
  std::vector<uint32_t> lost_ranks;  // kNodeLost: the ranks on the lost node
  std::optional<uint32_t> first_victim;  // kNodeLost: the first rank to fail, a victim
};

// Names the first rank to fail on its own. Pure. A rank fails when it
// reports an uncaught exception or an exit it began, or when its process
// dies other than by a clean exit 0. Ranks whose failure is a communication
// error caused by a peer, or a stop from outside, are victims: never named
// while another rank failed otherwise, whatever the order their reports
// arrived in. Among the others the earliest by source time is named. When
// only victims failed, the ranks that cannot be seen (their agent is gone)
// are the likeliest cause: their node is lost. A crash needs a certain
// failure (a non-zero exit, a signal, a reported failure) or a failed
// command, so that a job ending normally is not a crash.
class CrashDetector {
 public:
  explicit CrashDetector(CrashOptions options) : options_(options) {}

  // `first_heard` is when the supervisor first heard of a certain failure or
  // a failed command in this generation (InfinitePast(): not yet); `failed`
  // the first failed command of the generation, if any. The verdict once the
  // settle time has passed since `first_heard` (and, while only victims
  // failed and ranks still run, the culprit wait); nullopt before, and when
  // there is nothing to name.
  // `silent_nodes`: nodes whose agent cannot be heard; their ranks that have
  // not failed cannot be seen.
  std::optional<CrashVerdict> Check(const Job& job, absl::Time first_heard, absl::Time now,
                                    const std::optional<FailedLauncher>& failed = std::nullopt,
                                    const absl::flat_hash_set<NodeIndex>& silent_nodes = {}) const;

  // True when the job has a certain failure now (starts the settle clock).
  static bool HasFailure(const Job& job) { return job.has_certain_failure(); }

  const CrashOptions& options() const { return options_; }

 private:
  const CrashOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
