#ifndef TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "daemon/core/job.h"

namespace trainsup {

struct CrashOptions {
  // After the first failed death is heard of, wait this long for the other
  // agents' reports before naming the first rank to die: peers die within
  // ~0.2s of each other and each agent reports every --report-interval.
  // Default: 1s.
  absl::Duration settle = absl::Seconds(1);
};

struct CrashVerdict {
  uint32_t rank = 0;  // the first rank to fail
  // Its failure: time, and exit status if its process has ended.
  RankDeath death;
  uint32_t failed_ranks = 0;  // ranks failed: dead but not by a clean exit 0, or raised
};

// Names the first rank to fail in a crash. Pure. A rank fails when it
// reports an uncaught exception, or when its process dies other than by a
// clean exit 0, whichever its agent saw first. A crash needs at least one
// death that is certainly a failure (a non-zero exit, a signal, or after an
// uncaught exception), so that a job ending normally is not a crash.
class CrashDetector {
 public:
  explicit CrashDetector(CrashOptions options) : options_(options) {}

  // `first_heard` is when the supervisor first learned of a failed death in
  // this generation (the caller keeps it). `launcher_failed`: a node's
  // command (torchrun) exited non-zero, which makes the crash certain even
  // when no rank's own exit status could be read. Returns the verdict once
  // the settle time has passed, nullopt before, or when there is no crash.
  std::optional<CrashVerdict> Check(const Job& job, absl::Time first_heard, absl::Time now,
                                    bool launcher_failed = false) const;

  // True when the job has a failed death now (starts the settle clock).
  static bool HasFailure(const Job& job);

 private:
  const CrashOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CRASH_DETECTOR_H_
