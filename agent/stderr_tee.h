#ifndef TRAINSUP_AGENT_STDERR_TEE_H_
#define TRAINSUP_AGENT_STDERR_TEE_H_

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainsup {

// What the agent's command writes to its stderr, passed on to the agent's
// own stderr as it comes, with its last lines kept. The agent is the
// parent of torchrun; a thread of this class reads the command's stderr
// pipe, so that the command never waits for the agent's event loop (only
// for the agent's own stderr, as it would without the agent). The last
// lines tell what failed when the command fails before any rank reports,
// and what a rank that died without a word last wrote (torchrun's --tee
// copies each rank's stderr into its own as "[default3]:...").
//
// Lines are kept as common/failure_text.h's OutputLine keeps text, at most
// kMaxStderrLineBytes each; a carriage return starts the line over (a
// progress bar redraws itself). Thread-safe.
class StderrTee {
 public:
  // The lines kept by default: enough for a rank's traceback behind
  // torchrun's report of its failed children.
  static constexpr size_t kDefaultLines = 256;

  // Reads `fd` (owned; closed when done) on a thread of its own until its
  // end, writing everything read to `out` (not owned) and keeping the last
  // `max_lines` lines. REQUIRES: max_lines >= 1.
  explicit StderrTee(int fd, int out = STDERR_FILENO, size_t max_lines = kDefaultLines);
  // Stops the thread (what was not read yet is not), closes `fd`.
  ~StderrTee();
  StderrTee(const StderrTee&) = delete;
  StderrTee& operator=(const StderrTee&) = delete;

  // Waits up to `timeout` for the stream to end (every writer closed it).
  // True when it ended.
  bool AwaitEnd(absl::Duration timeout);

  // The last lines, oldest first; the line being written last, without its
  // newline yet, included.
  std::deque<std::string> Tail() const;
  // Lines read since the start (the one being written not counted).
  uint64_t lines() const;

 private:
  void Run();
  // Takes in `n` bytes read from the stream.
  void Take(const char* data, size_t n);
  void EndLine() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  const int out_;
  const size_t max_lines_;
  std::atomic<bool> stop_{false};  // the destructor's word to the thread
  bool writing_ = true;  // false once `out` failed: only the tail is kept then

  mutable absl::Mutex mu_;
  std::deque<std::string> tail_ ABSL_GUARDED_BY(mu_);
  std::string partial_ ABSL_GUARDED_BY(mu_);  // the line being written, raw
  uint64_t lines_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // last: it starts once everything else is ready
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_STDERR_TEE_H_
