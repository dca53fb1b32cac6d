#include "agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <variant>

#include "absl/strings/str_cat.h"
#include "agent/heartbeat_decoder.h"
#include "agent/torchrun_args.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/options.h"
#include "google/protobuf/util/json_util.h"

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

// Heartbeat kinds that tell the rank's pid is alive now (an exception report
// comes from a rank about to die).
bool ProvesLife(v1::HeartbeatKind kind) { return kind != v1::HEARTBEAT_KIND_EXCEPTION; }

}  // namespace

void BlockAgentSignals() {
  sigset_t set = AgentSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Agent::Inbox::Inbox() : event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
Agent::Inbox::~Inbox() { close(event_fd_); }

void Agent::Inbox::Push(const v1::SupervisorMessage& message) {
  {
    absl::MutexLock lock(&mu_);
    messages_.push_back(message);
  }
  const uint64_t one = 1;
  ssize_t ignored = write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

std::deque<v1::SupervisorMessage> Agent::Inbox::TakeAll() {
  uint64_t count;
  ssize_t ignored = read(event_fd_, &count, sizeof(count));
  (void)ignored;
  absl::MutexLock lock(&mu_);
  return std::move(messages_);
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)), incarnation_(RandomId()), batcher_(options_.max_backlog) {
  PreparedCommand prepared = PrepareCommand(options_.command);
  if (!prepared.warning.empty()) TRAINSUP_LOG_WARN("%s", prepared.warning);
  command_ = std::move(prepared.argv);
}

v1::AgentHello Agent::Hello() const {
  v1::AgentHello hello;
  hello.set_node(options_.node);
  hello.set_job(options_.job);
  hello.set_incarnation(incarnation_);
  hello.set_generation(batcher_.generation());
  hello.set_agent_version(TRAINSUP_VERSION);
  // The launcher's state as last published (the link thread calls this).
  *hello.mutable_launcher() = batcher_.launcher();
  absl::MutexLock lock(&plans_mu_);
  *hello.mutable_plans() = plans_.plans();
  return hello;
}

void Agent::PublishProcesses() { batcher_.SetProcesses(watcher_.Snapshot()); }
void Agent::PublishLauncher() { batcher_.SetLauncher(launcher_.status()); }

void Agent::Launch(uint64_t generation, const std::string& why) {
  generation_ = generation;
  batcher_.SetGeneration(generation);
  watcher_.Clear();
  PublishProcesses();
  stopped_by_supervisor_ = false;
  absl::Status started = launcher_.Start(
      command_, {{"TRAINSUP_SOCKET", socket_->path()},
                 {"TRAINSUP_PLAN_FILE", plan_path_},
                 {"TRAINSUP_JOB", options_.job},
                 {"TRAINSUP_NODE", options_.node},
                 {"TRAINSUP_GENERATION", absl::StrCat(generation)}});
  if (!started.ok()) {
    TRAINSUP_LOG_ERROR("%s", started.message());
    Finish(kExitFailure);
    return;
  }
  TRAINSUP_LOG_INFO("job %s node %s: started generation %d (pid %d): %s", options_.job,
                    options_.node, generation, launcher_.pid(), why);
  phase_ = Phase::kRunning;
  deadline_ = absl::InfiniteDuration();
  PublishLauncher();
}

void Agent::StopCommand(absl::Duration grace, const std::string& why) {
  if (!launcher_.running()) return;
  TRAINSUP_LOG_INFO("stopping generation %d (SIGTERM to its process group, SIGKILL after %s): %s",
                    generation_, absl::FormatDuration(grace), why);
  launcher_.SignalGroup(SIGTERM);
  kill_deadline_ = SteadyNow() + grace;
  phase_ = Phase::kStopping;
  PublishLauncher();
}

void Agent::Finish(int code) {
  if (!exit_code_) exit_code_ = code;
}

void Agent::OnDatagrams() {
  const absl::Duration now = SteadyNow();
  bool watched_changed = false;
  socket_->DrainAvailable([&](const RankSocket::Datagram& d) {
    if (d.foreign_sender) {
      batcher_.CountReject(v1::REJECT_REASON_WRONG_SENDER);
      return;
    }
    std::variant<v1::RankHeartbeat, v1::RejectReason> decoded = DecodeHeartbeat(d.payload);
    if (auto* reason = std::get_if<v1::RejectReason>(&decoded)) {
      batcher_.CountReject(*reason);
      return;
    }
    v1::RankHeartbeat& hb = std::get<v1::RankHeartbeat>(decoded);
    if (hb.pid() != 0 && ProvesLife(hb.kind())) {
      watched_changed |= watcher_.Watch(hb.rank(), hb.local_rank(), static_cast<pid_t>(hb.pid()),
                                        hb.generation() != 0 ? hb.generation() : generation_, now);
    }
    if (hb.kind() == v1::HEARTBEAT_KIND_EXCEPTION) watched_changed |= watcher_.NoteException(hb.rank(), now);
    batcher_.AddHeartbeat(std::move(hb));
  });
  if (watched_changed) PublishProcesses();
}

void Agent::OnSignals(int signal_fd) {
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      if (launcher_.ReapChildren()) OnCommandEnded();
      continue;
    }
    // SIGTERM / SIGINT / SIGHUP: the agent is being stopped (by a person or
    // the scheduler). Pass it on to the whole group and end with the
    // command; a second one, or the grace running out, escalates to SIGKILL.
    if (!launcher_.running()) {
      TRAINSUP_LOG_INFO("%s received while no command runs: exiting", strsignal(signal));
      Finish(128 + signal);
      continue;
    }
    if (!stopped_by_signal_) {
      stopped_by_signal_ = true;
      TRAINSUP_LOG_INFO("%s received: forwarding it to the command's process group",
                        strsignal(signal));
      launcher_.SignalGroup(signal == SIGHUP ? SIGTERM : signal);
      kill_deadline_ = SteadyNow() + options_.stop_grace;
      phase_ = Phase::kStopping;
    } else {
      TRAINSUP_LOG_WARN("second stop signal: killing the command's process group");
      launcher_.SignalGroup(SIGKILL);
    }
    PublishLauncher();
  }
}

void Agent::OnSupervisorMessage(const v1::SupervisorMessage& m) {
  // Any word from the supervisor restarts the wait for its decision.
  if (phase_ == Phase::kWaiting) deadline_ = SteadyNow() + options_.decision_timeout;
  if (m.has_welcome()) {
    supervisor_restarts_ = m.welcome().restarts();
    if (phase_ != Phase::kConnecting) return;
    if (m.welcome().launch()) {
      Launch(std::max<uint64_t>(1, m.welcome().generation()), "the supervisor says go");
    } else {
      TRAINSUP_LOG_INFO("the supervisor says wait (job stopping, restarting or held)");
      phase_ = Phase::kWaiting;
      deadline_ = SteadyNow() + options_.decision_timeout;
    }
  } else if (m.has_stop()) {
    stopped_by_supervisor_ = true;
    if (launcher_.running() && m.stop().generation() <= generation_) {
      StopCommand(absl::Seconds(m.stop().grace_seconds()), m.stop().reason());
    }
  } else if (m.has_start()) {
    if (launcher_.running()) {
      TRAINSUP_LOG_WARN("start of generation %d while generation %d runs: ignored",
                        m.start().generation(), generation_);
      return;
    }
    Launch(m.start().generation(), m.start().reason());
  } else if (m.has_hold()) {
    TRAINSUP_LOG_WARN("the job is held: %s; waiting up to %s for `trainsupctl resume`",
                      m.hold().reason(), absl::FormatDuration(options_.hold_timeout));
    if (!launcher_.running()) {
      phase_ = Phase::kHeld;
      deadline_ = SteadyNow() + options_.hold_timeout;
    }
  } else if (m.has_plan()) {
    OnPlan(m.plan());
  } else if (m.has_quarantined()) {
    TRAINSUP_LOG_ERROR("this node is quarantined: %s", m.quarantined().reason());
    quarantined_ = true;
    if (launcher_.running()) {
      StopCommand(options_.stop_grace, "node quarantined");
    } else {
      Finish(kExitQuarantined);
    }
  }
}

void Agent::OnPlan(const v1::CheckpointPlan& plan) {
  std::string text;
  {
    absl::MutexLock lock(&plans_mu_);
    for (const v1::CheckpointPlan& held : plans_.plans()) {
      if (held.plan_id() == plan.plan_id()) return;  // resent after a reconnect
    }
    *plans_.add_plans() = plan;
    google::protobuf::util::JsonPrintOptions json;
    json.preserve_proto_field_names = true;
    json.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(plans_, &text, json);
  }
  // Write aside and rename, so that a rank never reads half a file.
  const std::string tmp = plan_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    if (!out) {
      TRAINSUP_LOG_ERROR("cannot write the plan file %s", tmp);
      return;
    }
  }
  if (rename(tmp.c_str(), plan_path_.c_str()) != 0) {
    TRAINSUP_LOG_ERROR("cannot rename %s: %s", tmp, strerror(errno));
    return;
  }
  TRAINSUP_LOG_INFO("checkpoint plan %d: every %d steps from step %d%s", plan.plan_id(),
                    plan.interval_steps(), plan.effective_from_step(),
                    plan.one_off_steps_size() > 0
                        ? absl::StrCat(", one-off at step ", plan.one_off_steps(0))
                        : "");
}

void Agent::OnCommandEnded() {
  // Take the ranks' last words (an exception report is sent just before a
  // rank exits), note every death, and leave no process of the group behind.
  OnDatagrams();
  watcher_.CheckExits(SteadyNow());
  kill(-launcher_.pid(), SIGKILL);
  kill_deadline_ = absl::InfiniteDuration();
  PublishProcesses();
  PublishLauncher();
  last_exit_code_ = launcher_.ExitCode();
  TRAINSUP_LOG_INFO("generation %d ended with %s; %d heartbeats forwarded so far", generation_,
                    launcher_.status().signal() != 0
                        ? absl::StrCat("signal ", launcher_.status().signal())
                        : absl::StrCat("exit code ", launcher_.status().exit_code()),
                    batcher_.heartbeats_added());
  if (quarantined_) return Finish(kExitQuarantined);
  if (stopped_by_signal_) return Finish(last_exit_code_);
  if (last_exit_code_ == 0 && !stopped_by_supervisor_) return Finish(0);  // done
  if (!supervisor_restarts_) {
    TRAINSUP_LOG_INFO("the supervisor only observes: exiting with the command's exit code %d",
                      last_exit_code_);
    return Finish(last_exit_code_);
  }
  if (!link_->connected()) {
    // Fail-open: with no supervisor to decide, the scheduler decides.
    TRAINSUP_LOG_WARN("the supervisor is unreachable: exiting with the command's exit code %d",
                      last_exit_code_);
    return Finish(last_exit_code_);
  }
  phase_ = Phase::kWaiting;
  deadline_ = SteadyNow() + options_.decision_timeout;
}

void Agent::CheckTimers() {
  const absl::Duration now = SteadyNow();
  if (now >= kill_deadline_ && launcher_.running()) {
    TRAINSUP_LOG_WARN("generation %d did not stop in time: SIGKILL", generation_);
    launcher_.SignalGroup(SIGKILL);
    kill_deadline_ = absl::InfiniteDuration();
  }
  if (now < deadline_) return;
  switch (phase_) {
    case Phase::kConnecting:
      TRAINSUP_LOG_WARN("no word from the supervisor within %s: launching anyway",
                        absl::FormatDuration(options_.connect_timeout));
      Launch(1, "fail-open start");
      break;
    case Phase::kWaiting:
      TRAINSUP_LOG_WARN("no decision from the supervisor within %s: exiting with code %d",
                        absl::FormatDuration(options_.decision_timeout), last_exit_code_);
      Finish(last_exit_code_);
      break;
    case Phase::kHeld:
      TRAINSUP_LOG_WARN("still held after %s: exiting with code %d",
                        absl::FormatDuration(options_.hold_timeout), last_exit_code_);
      Finish(last_exit_code_);
      break;
    case Phase::kRunning:
    case Phase::kStopping:
      break;
  }
}

int Agent::Run() {
  // Orphaned ranks (their torchrun died first) become our children, so that
  // we reap them and no zombie outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t signals = AgentSignals();
  const int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0 || inbox_.fd() < 0) {
    TRAINSUP_LOG_ERROR("signalfd/eventfd: %s", strerror(errno));
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<RankSocket>> socket = RankSocket::Open(options_.socket_parent);
  if (!socket.ok()) {
    TRAINSUP_LOG_ERROR("cannot open the rank socket: %s", socket.status().message());
    close(signal_fd);
    return kExitFailure;
  }
  socket_ = std::move(*socket);
  plan_path_ = socket_->directory() + "/plans.json";

  LinkOptions link_options;
  link_options.address = options_.supervisor;
  link_options.report_interval = options_.report_interval;
  link_options.backoff_max = options_.reconnect_max;
  link_ = std::make_unique<SupervisorLink>(
      link_options, &batcher_, [this] { return Hello(); },
      [this](const v1::SupervisorMessage& m) { inbox_.Push(m); });
  v1::LauncherStatus waiting;
  waiting.set_state(v1::LauncherStatus::STATE_WAITING);
  batcher_.SetLauncher(waiting);
  link_->Start();
  phase_ = Phase::kConnecting;
  deadline_ = SteadyNow() + options_.connect_timeout;
  TRAINSUP_LOG_INFO("job %s node %s: rank socket %s; waiting for the supervisor at %s",
                    options_.job, options_.node, socket_->path(), options_.supervisor);

  while (!exit_code_) {
    std::vector<pollfd> fds = {
        {signal_fd, POLLIN, 0}, {socket_->fd(), POLLIN, 0}, {inbox_.fd(), POLLIN, 0}};
    for (int fd : watcher_.LiveFds()) fds.push_back({fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 100);
    if (fds[1].revents != 0) OnDatagrams();
    if (fds[0].revents != 0) OnSignals(signal_fd);
    if (fds[2].revents != 0) {
      for (const v1::SupervisorMessage& m : inbox_.TakeAll()) {
        if (!exit_code_) OnSupervisorMessage(m);
      }
    }
    if (watcher_.CheckExits(SteadyNow())) PublishProcesses();
    CheckTimers();
  }

  if (launcher_.running()) {  // e.g. quarantined or failing while running
    launcher_.SignalGroup(SIGKILL);
    while (launcher_.running() && !launcher_.ReapChildren()) poll(nullptr, 0, 10);
    PublishLauncher();
  }
  if (!link_->Flush(absl::Seconds(2))) {
    TRAINSUP_LOG_WARN("could not send the final report to the supervisor");
  }
  link_->Stop();
  close(signal_fd);
  TRAINSUP_LOG_INFO("exiting with code %d", *exit_code_);
  return *exit_code_;
}

}  // namespace trainsup
