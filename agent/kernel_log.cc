#include "agent/kernel_log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "agent/xid_line.h"

namespace trainsup {
namespace {

// A kmsg record is at most about 1 KiB of text; a read shorter than the
// record fails with EINVAL.
constexpr size_t kKmsgRecordBytes = 8192;
// What one read of a file takes at most.
constexpr size_t kFileReadBytes = 64 * 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<KernelLogFollower>> KernelLogFollower::Open(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = absl::StrCat(path, ": ", strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(why);
    if (errno == EACCES || errno == EPERM) return absl::PermissionDeniedError(why);
    return absl::UnavailableError(why);
  }
  struct stat st;
  const bool kmsg = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
  // kmsg: past the records already in the ring buffer; a file: its end.
  const off_t end = lseek(fd, 0, SEEK_END);
  return std::unique_ptr<KernelLogFollower>(
      new KernelLogFollower(path, fd, kmsg, end < 0 ? 0 : static_cast<int64_t>(end)));
}

KernelLogFollower::KernelLogFollower(std::string path, int fd, bool kmsg, int64_t offset)
    : path_(std::move(path)), fd_(fd), kmsg_(kmsg), offset_(offset) {}

KernelLogFollower::~KernelLogFollower() { close(fd_); }

void KernelLogFollower::Poll(const std::function<void(absl::string_view)>& on_line) {
  if (kmsg_) {
    PollKmsg(on_line);
  } else {
    PollFile(on_line);
  }
}

void KernelLogFollower::PollKmsg(const std::function<void(absl::string_view)>& on_line) {
  char record[kKmsgRecordBytes];
  for (int i = 0; i < kMaxLinesPerPoll; ++i) {
    const ssize_t n = read(fd_, record, sizeof(record));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) {  // overwritten before we read it: go on with the next
      ++records_lost_;
      continue;
    }
    if (n <= 0) return;  // EAGAIN: nothing more now
    // "PRIO,SEQ,USEC,FLAGS;TEXT\n" then " KEY=VALUE" lines: the text only.
    absl::string_view text(record, static_cast<size_t>(n));
    text = text.substr(0, text.find('\n'));
    on_line(text);
  }
}

void KernelLogFollower::PollFile(const std::function<void(absl::string_view)>& on_line) {
  struct stat st;
  if (fstat(fd_, &st) == 0 && st.st_size < offset_) {  // truncated (rotated in place)
    offset_ = 0;
    partial_.clear();
  }
  int lines = 0;
  std::string chunk(kFileReadBytes, '\0');
  while (lines < kMaxLinesPerPoll) {
    const ssize_t n = pread(fd_, chunk.data(), chunk.size(), offset_);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    size_t used = 0;
    absl::string_view data(chunk.data(), static_cast<size_t>(n));
    for (size_t eol; lines < kMaxLinesPerPoll && (eol = data.find('\n', used)) != data.npos;
         used = eol + 1) {
      const absl::string_view piece = data.substr(used, eol - used);
      if (partial_.empty()) {
        on_line(piece);
      } else {
        partial_.append(piece.data(), std::min(piece.size(), kMaxKernelLogLineBytes + 1));
        on_line(partial_);
        partial_.clear();
      }
      ++lines;
    }
    if (lines >= kMaxLinesPerPoll) {  // the rest of the chunk waits
      offset_ += static_cast<int64_t>(used);
      return;
    }
    // A line not ended yet: kept, bounded (the parser refuses one past its limit).
    const absl::string_view rest = data.substr(used);
    const size_t room = kMaxKernelLogLineBytes + 1 - std::min(partial_.size(), kMaxKernelLogLineBytes + 1);
    partial_.append(rest.data(), std::min(rest.size(), room));
    offset_ += n;
  }
}

}  // namespace trainsup
