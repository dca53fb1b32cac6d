#ifndef TRAINSUP_COMMON_BOUNDED_RUN_H_
#define TRAINSUP_COMMON_BOUNDED_RUN_H_

// Runs a command that must never wedge its caller: trainsupd's fence and
// unfence commands, the agent's git calls for a launch's provenance.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace trainsup {

struct BoundedRunOptions {
  absl::Duration timeout = absl::Seconds(30);
  // What is kept of the output at most (one read more may be kept: a caller
  // that clips the text can mark the cut).
  size_t max_output = 1024;
  // stderr goes with stdout into the output; else to /dev/null.
  bool merge_stderr = true;
};

// How a command ended.
struct BoundedRunResult {
  int spawn_error = 0;        // errno of a spawn that failed: nothing ran
  bool timed_out = false;     // still running at the deadline
  bool output_open = false;   // its output was still open at the end
  bool left_running = false;  // it exited, but a child held its output past the deadline
  bool reaped = false;        // `status` is known
  int status = 0;             // waitpid()'s status, when reaped
  std::string output;

  // Spawned, ended within the deadline, and exited 0.
  bool succeeded() const;
};

// Runs argv[0] (searched in $PATH) with argv, stdin on /dev/null, in a
// process group of its own, with no signal blocked. It waits for both ends
// of the command: its output closed and its process exited (either may come
// first: a command may exit and leave a child holding the output, or close
// its output and keep running). At the deadline whatever is left of its
// process group is killed; it is reaped within a second more (one that does
// not die even then is left to a detached thread), so that a run returns
// within the timeout and a second.
BoundedRunResult RunBounded(const std::vector<std::string>& argv,
                            const BoundedRunOptions& options);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_BOUNDED_RUN_H_
