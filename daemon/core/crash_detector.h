#ifndef TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"

namespace trainsup {

struct CrashOptions {
  // After the first failed death is heard of, wait this long for the other
  // agents' reports before naming the first rank to die: peers die within
  // ~0.2s of each other and each agent reports every --report-interval.
  // Default: 1s.
  absl::Duration settle = absl::Seconds(1);
};

// A node's command (torchrun) that exited non-zero in the job's generation.
struct FailedLauncher {
  NodeIndex node = kNoNode;
  LauncherInfo launcher;
};

struct CrashVerdict {
  // The first rank to fail; absent when a node's command failed with no rank
  // death to name (e.g. before any rank reported).
  std::optional<uint32_t> rank;
  NodeIndex node = kNoNode;  // the rank's node, or the failed command's
  // The rank's failure: when (source time) and its exit status if its process
  // ended. Without a rank: the command's exit status, dated when first heard.
  RankDeath death;
  uint32_t failed_ranks = 0;  // ranks failed: dead but not by a clean exit 0, or raised
  // Why, for people, without the names the caller knows: "died first (exit
  // code 1): ValueError: bad batch; 2 of 4 ranks failed".
  std::string reason;
};

// Names the first rank to fail in a crash. Pure. A rank fails when it
// reports an uncaught exception, or when its process dies other than by a
// clean exit 0, whichever its agent saw first. A crash needs at least one
// death that is certainly a failure (a non-zero exit, a signal, or after an
// uncaught exception) or a failed command, so that a job ending normally is
// not a crash.
class CrashDetector {
 public:
  explicit CrashDetector(CrashOptions options) : options_(options) {}

  // `first_heard` is when the supervisor first heard of a certain failure or
  // a failed command in this generation (InfinitePast(): not yet); `failed`
  // the first failed command of the generation, if any. The verdict once the
  // settle time has passed since `first_heard`; nullopt before, and when
  // there is nothing to name.
  std::optional<CrashVerdict> Check(const Job& job, absl::Time first_heard, absl::Time now,
                                    const std::optional<FailedLauncher>& failed = std::nullopt) const;

  // True when the job has a certain failure now (starts the settle clock).
  static bool HasFailure(const Job& job) { return job.has_certain_failure(); }

  const CrashOptions& options() const { return options_; }

 private:
  const CrashOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
