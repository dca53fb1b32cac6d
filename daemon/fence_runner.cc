#include "daemon/fence_runner.h"

#include <string.h>
#include <sys/wait.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/bounded_run.h"
#include "common/format.h"
#include "common/limits.h"

namespace trainsup {
namespace {

// The exit status in words (ExitStatusText): "exit code 0", "killed by
// SIGTERM (signal 15)".
std::string Describe(int wait_status) {
  const bool exited = WIFEXITED(wait_status);
  const bool signaled = WIFSIGNALED(wait_status);
  return ExitStatusText(exited || signaled, exited ? WEXITSTATUS(wait_status) : 0,
                        signaled ? WTERMSIG(wait_status) : 0);
}

}  // namespace

FenceRunner::FenceRunner(Commands commands, absl::Duration timeout, DoneFn done)
    : commands_(std::move(commands)), timeout_(timeout), done_(std::move(done)) {
  thread_ = std::thread([this] { Loop(); });
}

FenceRunner::~FenceRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
  }
  thread_.join();
}

bool FenceRunner::Enqueue(const FenceRequest& request) {
  if (CommandFor(request.action).empty()) return false;
  absl::MutexLock lock(&mu_);
  queue_.push_back(request);
  return true;
}

void FenceRunner::Loop() {
  for (;;) {
    FenceRequest job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    auto [ok, detail] = RunOnce(CommandFor(job.action), job.node, job.reason, timeout_);
    done_(job, ok, detail);
  }
}

std::pair<bool, std::string> FenceRunner::RunOnce(const std::string& command,
                                                  const std::string& node,
                                                  const std::string& reason,
                                                  absl::Duration timeout) {
  // The last line of defence: a name beginning with '-' would read as an
  // option to the scheduler's tool (the supervisor refuses such names).
  if (!IsValidName(node)) return {false, absl::StrCat("refused: the node name must be ", kNameRule)};
  BoundedRunOptions options;
  options.timeout = timeout;
  options.max_output = kMaxFenceOutputLength;  // more than the limit: ClipText marks the cut
  BoundedRunResult run = RunBounded({command, node, reason}, options);
  if (run.spawn_error != 0) {
    return {false, absl::StrCat("cannot run ", command, ": ", strerror(run.spawn_error))};
  }
  std::string& output = run.output;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  std::string detail;
  if (run.timed_out) {
    detail = absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                          run.output_open ? "" : " (its output closed, still running)",
                          "; its process group was killed");
    if (!run.reaped) absl::StrAppend(&detail, ", and did not die within 1s");
  } else {
    detail = Describe(run.status);
    if (run.left_running) {
      absl::StrAppend(&detail, "; processes it left holding its output were killed after ",
                      absl::FormatDuration(timeout));
    }
  }
  if (!output.empty()) absl::StrAppend(&detail, "; output: ", ClipText(output, kMaxFenceOutputLength));
  return {run.succeeded(), detail};
}

}  // namespace trainsup
