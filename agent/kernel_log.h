#ifndef TRAINSUP_AGENT_KERNEL_LOG_H_
#define TRAINSUP_AGENT_KERNEL_LOG_H_

// Follows the kernel log for the GPU driver's lines (docs/gpu.md): /dev/kmsg
// (one record a read, non-blocking), or a file that grows (a syslog, or a
// test's stand-in). Only what is written after Open counts: kmsg replays its
// ring buffer to a new reader, and a file holds what is long past.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

class KernelLogFollower {
 public:
  // Opens `path` at its end. NotFound / PermissionDenied as open(2) says.
  static absl::StatusOr<std::unique_ptr<KernelLogFollower>> Open(const std::string& path);
  ~KernelLogFollower();
  KernelLogFollower(const KernelLogFollower&) = delete;
  KernelLogFollower& operator=(const KernelLogFollower&) = delete;

  // Hands each whole line written since the last call to `on_line`, at most
  // kMaxLinesPerPoll of them (the rest wait for the next call), without
  // blocking. A line longer than the parser reads is handed cut at that
  // length (it refuses it as too long).
  static constexpr int kMaxLinesPerPoll = 1024;
  void Poll(const std::function<void(absl::string_view)>& on_line);

  const std::string& path() const { return path_; }
  // kmsg records the kernel overwrote before they were read.
  uint64_t records_lost() const { return records_lost_; }

 private:
  KernelLogFollower(std::string path, int fd, bool kmsg, int64_t offset);
  void PollKmsg(const std::function<void(absl::string_view)>& on_line);
  void PollFile(const std::function<void(absl::string_view)>& on_line);

  const std::string path_;
  const int fd_;
  const bool kmsg_;
  int64_t offset_;       // a file's: where the next read starts
  std::string partial_;  // a file's line not ended yet
  uint64_t records_lost_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_KERNEL_LOG_H_
