#include "agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <random>
#include <variant>

#include "absl/strings/str_cat.h"
#include "agent/heartbeat_decoder.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/options.h"

namespace trainsup {
namespace {

sigset_t AgentSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  return set;
}

uint64_t RandomId() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// Heartbeat kinds that tell the rank's pid is alive now.
bool ProvesLife(v1::HeartbeatKind kind) { return kind != v1::HEARTBEAT_KIND_EXCEPTION; }

}  // namespace

void BlockAgentSignals() {
  sigset_t set = AgentSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)), incarnation_(RandomId()), batcher_(options_.max_backlog) {
  batcher_.SetGeneration(generation_);
}

v1::AgentHello Agent::Hello() const {
  v1::AgentHello hello;
  hello.set_node(options_.node);
  hello.set_job(options_.job);
  hello.set_incarnation(incarnation_);
  hello.set_generation(batcher_.generation());
  hello.set_agent_version(TRAINSUP_VERSION);
  return hello;
}

void Agent::PublishProcesses() { batcher_.SetProcesses(watcher_.Snapshot()); }
void Agent::PublishLauncher() { batcher_.SetLauncher(launcher_.status()); }

void Agent::OnDatagrams() {
  const absl::Duration now = SteadyNow();
  bool watched_changed = false;
  socket_->DrainAvailable([&](const RankSocket::Datagram& d) {
    if (d.foreign_sender) {
      batcher_.CountReject(RejectReason::kWrongSender);
      return;
    }
    std::variant<v1::RankHeartbeat, RejectReason> decoded = DecodeHeartbeat(d.payload);
    if (auto* reason = std::get_if<RejectReason>(&decoded)) {
      batcher_.CountReject(*reason);
      return;
    }
    v1::RankHeartbeat& hb = std::get<v1::RankHeartbeat>(decoded);
    if (hb.pid() != 0 && ProvesLife(hb.kind())) {
      watched_changed |= watcher_.Watch(hb.rank(), hb.local_rank(), static_cast<pid_t>(hb.pid()),
                                        hb.generation() != 0 ? hb.generation() : generation_, now);
    }
    batcher_.AddHeartbeat(std::move(hb));
  });
  if (watched_changed) PublishProcesses();
}

void Agent::OnSignals(int signal_fd) {
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      if (launcher_.ReapChildren()) PublishLauncher();
      continue;
    }
    // SIGTERM / SIGINT / SIGHUP: pass it on to the whole group; a second one,
    // or the grace period running out, escalates to SIGKILL.
    ++stop_signals_;
    if (stop_signals_ == 1) {
      TRAINSUP_LOG_INFO("%s received: forwarding it to the command's process group",
                        strsignal(signal));
      launcher_.SignalGroup(signal == SIGHUP ? SIGTERM : signal);
      kill_deadline_ = SteadyNow() + options_.stop_grace;
    } else {
      TRAINSUP_LOG_WARN("second stop signal: killing the command's process group");
      launcher_.SignalGroup(SIGKILL);
    }
    PublishLauncher();
  }
}

int Agent::Run() {
  // Orphaned ranks (their torchrun died first) become our children, so that
  // we reap them and no zombie outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t signals = AgentSignals();
  const int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0) {
    TRAINSUP_LOG_ERROR("signalfd: %s", strerror(errno));
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<RankSocket>> socket = RankSocket::Open(options_.socket_parent);
  if (!socket.ok()) {
    TRAINSUP_LOG_ERROR("cannot open the rank socket: %s", socket.status().message());
    close(signal_fd);
    return kExitFailure;
  }
  socket_ = std::move(*socket);

  LinkOptions link_options;
  link_options.address = options_.supervisor;
  link_options.report_interval = options_.report_interval;
  link_options.backoff_max = options_.reconnect_max;
  SupervisorLink link(link_options, &batcher_, [this] { return Hello(); },
                      [](const v1::SupervisorMessage&) {});
  link.Start();

  absl::Status started = launcher_.Start(
      options_.command, {{"TRAINSUP_SOCKET", socket_->path()},
                         {"TRAINSUP_JOB", options_.job},
                         {"TRAINSUP_NODE", options_.node},
                         {"TRAINSUP_GENERATION", absl::StrCat(generation_)}});
  if (!started.ok()) {
    TRAINSUP_LOG_ERROR("%s", started.message());
    link.Stop();
    close(signal_fd);
    return kExitFailure;
  }
  TRAINSUP_LOG_INFO("job %s node %s: started generation %d (pid %d), rank socket %s", options_.job,
                    options_.node, generation_, launcher_.pid(), socket_->path());
  PublishLauncher();

  while (launcher_.running()) {
    std::vector<pollfd> fds = {{signal_fd, POLLIN, 0}, {socket_->fd(), POLLIN, 0}};
    for (int fd : watcher_.LiveFds()) fds.push_back({fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 100);
    if (fds[1].revents != 0) OnDatagrams();
    if (fds[0].revents != 0) OnSignals(signal_fd);
    if (watcher_.CheckExits(SteadyNow())) PublishProcesses();
    if (SteadyNow() >= kill_deadline_) {
      TRAINSUP_LOG_WARN("the command did not stop within %s: SIGKILL",
                        absl::FormatDuration(options_.stop_grace));
      launcher_.SignalGroup(SIGKILL);
      kill_deadline_ = absl::InfiniteDuration();
    }
  }

  // The command has ended. Take the ranks' last words (an exception report is
  // sent just before a rank exits), note every death, and leave no process
  // of the group behind.
  OnDatagrams();
  watcher_.CheckExits(SteadyNow());
  kill(-launcher_.pid(), SIGKILL);
  PublishProcesses();
  PublishLauncher();
  const int code = launcher_.ExitCode();
  TRAINSUP_LOG_INFO("command exited with %s; %d heartbeats forwarded",
                    launcher_.status().signal() != 0
                        ? absl::StrCat("signal ", launcher_.status().signal())
                        : absl::StrCat("code ", launcher_.status().exit_code()),
                    batcher_.heartbeats_added());
  if (!link.Flush(absl::Seconds(2))) {
    TRAINSUP_LOG_WARN("could not send the final report to the supervisor");
  }
  link.Stop();
  close(signal_fd);
  return code;
}

}  // namespace trainsup
