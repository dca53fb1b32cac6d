// `trainsupctl top`: the terminal side (raw keys, signals, drawing). What is
// drawn is RenderTopScreen's (cli/top.cc).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/top.h"
#include "common/options.h"

namespace trainsup {
namespace {

constexpr absl::Duration kRefresh = absl::Seconds(1);
constexpr int kUnlimitedColumns = 1 << 16;

// The signals the view ends or redraws on arrive as bytes on this pipe, so
// that the loop sees them in poll() beside the keys (a handler may do no
// more than write).
int signal_pipe[2] = {-1, -1};

extern "C" void OnSignal(int signal_number) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  (void)!write(signal_pipe[1], &byte, 1);
  errno = saved;
}

void WriteAll(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal went away: nothing left to draw on
    done += static_cast<size_t>(n);
  }
}

// TIOCGWINSZ of stdout; else $LINES x $COLUMNS; else 24 x 80.
TerminalSize QuerySize() {
  TerminalSize size;
  struct winsize ws = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    size.rows = ws.ws_row;
    size.cols = ws.ws_col;
    return size;
  }
  if (const char* lines = std::getenv("LINES"); lines != nullptr && std::atoi(lines) > 0) {
    size.rows = std::atoi(lines);
  }
  if (const char* cols = std::getenv("COLUMNS"); cols != nullptr && std::atoi(cols) > 0) {
    size.cols = std::atoi(cols);
  }
  return size;
}

// The live view's hold on the terminal: keys unbuffered and unechoed, the
// alternate screen, the cursor hidden, and the signal handlers. All of it is
// undone when this goes out of scope, however the view ends (q, a signal, an
// error).
class TerminalSession {
 public:
  TerminalSession() {
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &action, &saved_[i]);
    // Keys: no line buffering, no echo. ISIG stays on, so Ctrl-C is SIGINT
    // (handled above) and Ctrl-Z still suspends.
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios_) == 0) {
      struct termios raw = saved_termios_;
      raw.c_lflag &= ~(ICANON | ECHO);
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      keys_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    WriteAll("\x1b[?1049h\x1b[?25l");  // alternate screen, cursor hidden
  }

  ~TerminalSession() {
    WriteAll("\x1b[?25h\x1b[?1049l");  // cursor shown, the screen as it was
    if (keys_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios_);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
    close(signal_pipe[0]);
    close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
  }

  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  // Keys can be read from stdin.
  bool keys() const { return keys_; }

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
  std::array<struct sigaction, 4> saved_ = {};
  struct termios saved_termios_ = {};
  bool keys_ = false;
};

void Draw(const std::vector<std::string>& lines) {
  // Home, each line cleared to its end, then everything below cleared. No
  // newline after the last line, so that a full screen never scrolls.
  std::string frame = "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::StrAppend(&frame, lines[i], "\x1b[K", i + 1 < lines.size() ? "\r\n" : "");
  }
  frame += "\x1b[J";
  WriteAll(frame);
}

// Runs the live view until a key or a signal ends it; returns the exit code.
int LiveView(TopView& view) {
  TerminalSession session;
  TerminalSize size = QuerySize();
  bool stdin_open = session.keys();
  absl::Time next_refresh = absl::InfinitePast();
  while (true) {
    if (absl::Now() >= next_refresh) {
      view.Refresh(TopRankRows(size), absl::Now());
      next_refresh = absl::Now() + kRefresh;
    }
    Draw(RenderTopScreen(view.data(), size, absl::Now()));

    struct pollfd fds[2] = {{signal_pipe[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    const int wait_ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(next_refresh - absl::Now())) + 1);
    if (poll(fds, stdin_open ? 2 : 1, wait_ms) < 0 && errno != EINTR) {
      return kExitFailure;
    }
    if (fds[0].revents & POLLIN) {
      unsigned char signals[16];
      const ssize_t n = read(signal_pipe[0], signals, sizeof(signals));
      for (ssize_t i = 0; i < n; ++i) {
        if (signals[i] != SIGWINCH) return 128 + signals[i];  // as if the signal had ended it
        // Refit at once, and ask for as many ranks as now fit.
        size = QuerySize();
        next_refresh = absl::InfinitePast();
      }
    }
    if (stdin_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char keys[64];
      const ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) stdin_open = false;  // no keys
      for (ssize_t i = 0; i < n; ++i) {
        if (keys[i] == 'q' || keys[i] == 'Q') return kExitOk;
      }
    }
  }
}

}  // namespace

int RunTop(OperatorClient& client, std::string job_id) {
  if (isatty(STDOUT_FILENO)) {
    // The usual order: open the monitor, then launch the job.
    TopView view(&client, job_id);
    return LiveView(view);
  }
  if (job_id.empty()) {
    absl::StatusOr<v1::ListJobsResponse> jobs = client.ListJobs();
    if (!jobs.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(jobs.status().message()).c_str());
      return ExitCodeFor(jobs.status());
    }
    if (jobs->jobs_size() != 1) {
      std::vector<std::string> names;
      for (const v1::Job& job : jobs->jobs()) names.push_back(job.job_id());
      if (names.empty()) {
        std::fprintf(stderr, "error: the supervisor knows no job yet\n");
        return kExitNotFound;
      }
      std::fprintf(stderr, "error: the supervisor knows %d jobs (%s): say which, trainsupctl top JOB\n",
                   jobs->jobs_size(), absl::StrJoin(names, ", ").c_str());
      return kExitUsage;
    }
    job_id = jobs->jobs(0).job_id();
  }
  TopView view(&client, job_id);
  // Not a terminal (a script, a pipe): one frame, $LINES rows (24) but lines
  // as long as they are, unless $COLUMNS says otherwise; an error also goes
  // to stderr, as with every verb.
  TerminalSize size = QuerySize();
  if (std::getenv("COLUMNS") == nullptr) size.cols = kUnlimitedColumns;
  view.Refresh(TopRankRows(size), absl::Now());
  const std::string frame =
      absl::StrJoin(RenderTopScreen(view.data(), size, absl::Now()), "\n") + "\n";
  std::fwrite(frame.data(), 1, frame.size(), stdout);
  const absl::Status& error = view.data().error;
  if (error.ok()) return kExitOk;
  std::fprintf(stderr, "error: %s\n", std::string(error.message()).c_str());
  return ExitCodeFor(error);
}

}  // namespace trainsup
