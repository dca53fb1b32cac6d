#include "agent/stderr_tee.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>

#include "common/failure_text.h"

namespace trainsup {
namespace {

// The raw bytes of one line kept before it is cut to kMaxStderrLineBytes:
// room for multi-byte characters and escapes that OutputLine replaces.
constexpr size_t kMaxRawLineBytes = 4 * kMaxStderrLineBytes;

// How often the thread looks whether it is to stop, while nothing comes.
constexpr int kStopCheckMs = 100;

// Writes all of `data` to `fd`; false when `fd` fails (closed, gone).
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t written = write(fd, data, n);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data += written;
    n -= static_cast<size_t>(written);
  }
  return true;
}

}  // namespace

StderrTee::StderrTee(int fd, int out, size_t max_lines)
    : fd_(fd), out_(out), max_lines_(max_lines), thread_([this] { Run(); }) {}

StderrTee::~StderrTee() {
  stop_.store(true);
  thread_.join();
  close(fd_);
}

void StderrTee::Run() {
  // A closed stderr of the agent's must not end the agent: the write fails
  // with EPIPE instead (the signal stays pending on this thread).
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  char buffer[64 << 10];
  while (!stop_.load()) {
    pollfd fds[1] = {{fd_, POLLIN, 0}};
    const int ready = poll(fds, 1, kStopCheckMs);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // the end: every writer closed it
    if (writing_) writing_ = WriteAll(out_, buffer, static_cast<size_t>(n));
    Take(buffer, static_cast<size_t>(n));
  }
  absl::MutexLock lock(&mu_);
  if (!partial_.empty()) EndLine();
  ended_ = true;
}

void StderrTee::Take(const char* data, size_t n) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    if (c == '\n') {
      EndLine();
    } else if (c == '\r') {
      partial_.clear();  // the line is drawn again from its start
    } else if (partial_.size() < kMaxRawLineBytes) {
      partial_ += c;
    }
  }
}

void StderrTee::EndLine() {
  if (tail_.size() >= max_lines_) tail_.pop_front();
  tail_.push_back(OutputLine(partial_, kMaxStderrLineBytes));
  partial_.clear();
  ++lines_;
}

bool StderrTee::AwaitEnd(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&ended_), timeout);
}

std::deque<std::string> StderrTee::Tail() const {
  absl::MutexLock lock(&mu_);
  std::deque<std::string> tail = tail_;
  if (!partial_.empty()) {
    if (tail.size() >= max_lines_) tail.pop_front();
    tail.push_back(OutputLine(partial_, kMaxStderrLineBytes));
  }
  return tail;
}

uint64_t StderrTee::lines() const {
  absl::MutexLock lock(&mu_);
  return lines_;
}

}  // namespace trainsup
