#include "agent/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/dcgm_job_mapping.h"
#include "agent/flight_record_proto.h"
#include "agent/flight_recorder.h"
#include "agent/heartbeat_decoder.h"
#include "agent/nccl_dumps.h"
#include "agent/xid_line.h"
#include "common/bounded_run.h"
#include "agent/rank_log.h"
#include "common/free_port.h"
#include "common/provenance.h"
#include "agent/torchrun_args.h"
#include "common/failure_text.h"
#include "common/clock.h"
#include "common/format.h"
#include "common/log.h"
#include "common/options.h"
#include "common/random_id.h"

namespace trainsup {
namespace {

// What `m` carries ("stop", "start", ...), for a log line.
std::string BodyName(const v1::SupervisorMessage& m) {
  const google::protobuf::FieldDescriptor* field =
      m.GetDescriptor()->FindFieldByNumber(m.body_case());
  return field != nullptr ? field->name() : "message";
}

sigset_t AgentSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  return set;
}

// The poll period of the event loop; shorter while stacks are collected (a
// rank's answer is judged by its file no longer changing).
constexpr int kPollMs = 100;
constexpr int kCollectingPollMs = 20;

// While ranks send, the rank socket is drained on a timer (--drain-interval)
// instead of on each datagram (DrainSchedule); after a second without one,
// the agent waits on the socket again.
constexpr absl::Duration kDrainQuiet = absl::Seconds(1);

// The timer is used only where the socket holds this many datagrams between
// two drains: 8 ranks' compute begin, compute end and step, twice over.
// With fewer (the kernel's default net.unix.max_dgram_qlen is 10) such a
// burst would be refused in part, and the agent reads each datagram as it
// comes instead.
constexpr int kDrainMinQueue = 48;

absl::Duration DrainInterval(const AgentOptions& options) {
  if (options.drain_forced || options.drain_interval <= absl::ZeroDuration()) {
    return options.drain_interval;
  }
  const int capacity = RankSocket::QueueCapacity();
  if (capacity >= kDrainMinQueue) return options.drain_interval;
  TRAINSUP_LOG_INFO("the rank socket queues %d datagrams (net.unix.max_dgram_qlen): reading each "
                    "as it comes, not every %s (raise it to %d or more for that)",
                    capacity, absl::FormatDuration(options.drain_interval), kDrainMinQueue - 1);
  return absl::ZeroDuration();
}

// nvidia-smi answers in well under a second on a healthy node; one that
// hangs (a GPU off the bus) must not hold the agent's start.
constexpr absl::Duration kNvidiaSmiTimeout = absl::Seconds(10);
// How often the loop looks for a new GPU health reading (the poller reads
// every --gpu-health-interval; this only bounds how late a change goes up).
constexpr absl::Duration kGpuHealthCheckInterval = absl::Seconds(1);
// What goes up of the preflight's output: its end.
constexpr size_t kPreflightOutputBytes = 4096;
// What trainsupd accepts of one rank's flight record.
constexpr size_t kMaxFlightRecordGroupsSent = 64;
constexpr size_t kMaxFlightRecordOpsSent = 8;
// A node's GPUs, at most (what trainsupd accepts of one report).
constexpr size_t kMaxGpusReported = 64;
// An error the driver repeats (an Xid storm) goes up once in this long.
constexpr absl::Duration kXidResendInterval = absl::Seconds(10);
// The (Xid, GPU) pairs remembered for that: a node has at most a few dozen
// GPUs and the driver a few hundred codes; past this, the memory starts over.
constexpr size_t kMaxXidsRemembered = 1024;

// How long an exiting agent waits for the supervisor to read its final
// report (reconnecting if need be).
constexpr absl::Duration kFinalReportTimeout = absl::Seconds(5);

// After the command ended, how long its stderr may take to end.
constexpr absl::Duration kStderrDrainTime = absl::Milliseconds(300);

// The size of a file; 0 when it cannot be read (missing).
int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// `length` bytes of a file from `offset`; fewer when it is shorter.
std::string ReadRange(const std::string& path, int64_t offset, int64_t length) {
  std::string bytes;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  bytes.resize(static_cast<size_t>(length));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got,
                            static_cast<off_t>(offset + static_cast<int64_t>(got)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  bytes.resize(got);
  return bytes;
}

}  // namespace

void BlockAgentSignals() {
  sigset_t set = AgentSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Agent::Inbox::Inbox() : event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
Agent::Inbox::~Inbox() { close(event_fd_); }

void Agent::Inbox::Push(LinkEvent event) {
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  const uint64_t one = 1;
  ssize_t ignored = write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

std::deque<Agent::LinkEvent> Agent::Inbox::TakeAll() {
  uint64_t count;
  ssize_t ignored = read(event_fd_, &count, sizeof(count));
  (void)ignored;
  absl::MutexLock lock(&mu_);
  return std::move(events_);
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      incarnation_(RandomId()),
      batcher_(options_.max_backlog),
      drain_(DrainInterval(options_), kDrainQuiet) {
  PreparedCommand prepared = PrepareCommand(options_.command);
  if (!prepared.warning.empty()) TRAINSUP_LOG_WARN("%s", prepared.warning);
  command_ = std::move(prepared.argv);
  min_nodes_ = options_.min_nodes != 0 ? options_.min_nodes : prepared.min_nodes;
  rank_log_dir_ = prepared.log_dir;
  if (options_.advertise_address.empty()) return;
  if (prepared.rendezvous == CommandRendezvous::kNone) {
    TRAINSUP_LOG_WARN("--advertise-address is set but the command has no rendezvous trainsupd "
                      "can move (torchrun's c10d or static one): its own arguments apply");
    return;
  }
  const uint32_t port = options_.rendezvous_port != 0 ? options_.rendezvous_port : FreePort();
  if (port == 0) {
    TRAINSUP_LOG_WARN("no free port for a rendezvous store on this node: its own arguments apply");
    return;
  }
  rendezvous_kind_ = prepared.rendezvous;
  rendezvous_offer_.set_kind(prepared.rendezvous == CommandRendezvous::kC10d
                                 ? v1::RendezvousOffer::KIND_C10D
                                 : v1::RendezvousOffer::KIND_STATIC);
  rendezvous_offer_.set_address(options_.advertise_address);
  rendezvous_offer_.set_port(port);
  rendezvous_offer_.set_node_rank(prepared.node_rank);
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
  *hello.mutable_plans() = plans_->plans().plans();
  hello.set_min_nodes(min_nodes_);
  for (const std::string& rule : options_.verdict_rules) hello.add_verdict_rules(rule);
  if (rendezvous_kind_ != CommandRendezvous::kNone) *hello.mutable_rendezvous() = rendezvous_offer_;
  if (preflight_) *hello.mutable_preflight() = *preflight_;
  return hello;
}

void Agent::PublishProcesses() { batcher_.SetProcesses(watcher_.Snapshot()); }

void Agent::PublishLauncher() {
  v1::LauncherStatus status = launcher_.status();
  if (status.state() == v1::LauncherStatus::STATE_EXITED) {
    for (const std::string& line : failure_lines_) status.add_stderr_lines(line);
  }
  batcher_.SetLauncher(status);
}

void Agent::NoteRankStderr(absl::Duration since) {
  const std::vector<std::pair<uint32_t, uint32_t>> silent = watcher_.SilentFailures(since);
  if (silent.empty()) return;
  const std::deque<std::string> tail = launcher_.StderrTail();
  bool changed = false;
  for (const auto& [rank, local_rank] : silent) {
    // torchrun's --tee copy, or what ranks wrote to its stderr; else the
    // rank's own file under torchrun's --log_dir (--redirects without --tee).
    std::string line = InfrastructureLineOf(tail, local_rank);
    if (line.empty()) line = InfrastructureLineOf(RankStderrLog(rank_log_dir_, local_rank), local_rank);
    if (line.empty() || !watcher_.NoteStderrLine(rank, line)) continue;
    TRAINSUP_LOG_WARN("rank %d died without a word; its stderr names a node fault: %s", rank,
                      line);
    changed = true;
  }
  if (changed) PublishProcesses();
}

void Agent::Do(const AgentAction& action) {
  if (action.kind == AgentAction::Kind::kNone) return;
  // A collection is over once the state machine left its phase: its stacks
  // go up before anything else is done to the ranks.
  if (stacks_ != nullptr && state_->phase() != AgentStateMachine::Phase::kCollecting) {
    FinishStackCollection();
  }
  switch (action.kind) {
    case AgentAction::Kind::kNone:
      return;
    case AgentAction::Kind::kLaunch:
      if (action.unsupervised) {
        TRAINSUP_LOG_ERROR(
            "UNSUPERVISED: the supervisor at %s did not answer within %s; launching generation "
            "%d anyway (--fail-mode open). Until it answers nothing watches this job: no hang or "
            "crash is detected, nothing is restarted, no checkpoint is planned. --fail-mode "
            "closed launches nothing instead and exits %d",
            options_.supervisor, absl::FormatDuration(options_.timeouts.connect_timeout),
            action.generation, kExitUnsupervised);
      }
      Launch(action.generation, action.reason);
      return;
    case AgentAction::Kind::kSignal:
      if (action.signal == SIGKILL) {
        TRAINSUP_LOG_WARN("%s", action.reason);
      } else {
        TRAINSUP_LOG_INFO("%s", action.reason);
      }
      launcher_.SignalGroup(action.signal);
      PublishLauncher();
      return;
    case AgentAction::Kind::kWait:
    case AgentAction::Kind::kNote:
      TRAINSUP_LOG_INFO("%s", action.reason);
      return;
    case AgentAction::Kind::kIgnore:
      TRAINSUP_LOG_WARN("ignored: %s", action.reason);
      return;
    case AgentAction::Kind::kAlert:
      TRAINSUP_LOG_ERROR("%s", action.reason);
      return;
    case AgentAction::Kind::kCollectStacks:
      TRAINSUP_LOG_INFO("%s", action.reason);
      BeginStackCollection(SteadyNow(), action.generation);
      return;
    case AgentAction::Kind::kFinish:
      // Said once: as the error line when there is one that says it all.
      if (action.error != action.reason) TRAINSUP_LOG_INFO("%s", action.reason);
      if (!action.error.empty()) std::fprintf(stderr, "error: %s\n", action.error.c_str());
      return;  // Run ends its loop: state_ is done
  }
}

void Agent::Launch(uint64_t generation, const std::string& why) {
  watcher_.Clear();
  failure_lines_.clear();
  rank_drops_logged_.clear();  // the new ranks count from zero
  PublishProcesses();
  std::vector<std::string> argv = command_;
  if (rendezvous_generation_ == generation && rendezvous_kind_ != CommandRendezvous::kNone) {
    RendezvousArgs args;
    args.address = rendezvous_.address();
    args.port = rendezvous_.port();
    args.is_host = rendezvous_.host_node() == options_.node;
    args.node_rank = rendezvous_.node_rank();
    argv = RewriteRendezvous(command_, rendezvous_kind_, args);
    TRAINSUP_LOG_INFO("generation %d meets on %s (%s:%d)%s", generation, rendezvous_.host_node(),
                      args.address, args.port, args.is_host ? ": this node hosts the store" : "");
  }
  Launcher::EnvVars env = {
      {"TRAINSUP_SOCKET", socket_->path()},
      {"TRAINSUP_PLAN_FILE", plans_->path()},
      {"TRAINSUP_STACK_DIR", socket_->directory()},
      {"TRAINSUP_JOB", options_.job},
      {"TRAINSUP_NODE", options_.node},
      {"TRAINSUP_GENERATION", absl::StrCat(generation)},
      {"TRAINSUP_HEARTBEAT_FIELDS", absl::StrCat(HighestHeartbeatField())},
      {"TRAINSUP_HEARTBEAT_RECORDS", absl::StrCat(kMaxRecordsPerDatagram)}};
  // Where the supervisor says to resume (hb.resume_limit(), hb.skip_range()).
  if (resume_generation_ == generation && resume_.has_limit()) {
    env.emplace_back("TRAINSUP_RESUME_LIMIT", absl::StrCat(resume_.limit()));
    TRAINSUP_LOG_INFO("generation %d loads the newest checkpoint at or below step %d", generation,
                      resume_.limit());
  }
  if (resume_generation_ == generation && resume_.has_skip_first() && resume_.has_skip_last()) {
    env.emplace_back("TRAINSUP_SKIP_RANGE",
                     absl::StrCat(resume_.skip_first(), ",", resume_.skip_last()));
    TRAINSUP_LOG_INFO("generation %d skips the batches of steps %d to %d", generation,
                      resume_.skip_first(), resume_.skip_last());
  }
  // NCCL's flight recorder on, its dumps and pipes beside the stacks,
  // unless the user set them (docs/gpu.md). The paths are this agent's own
  // directory, another at each agent's start: not the job's provenance,
  // which would show them changed at every requeue.
  Launcher::EnvVars launch_env = env;
  for (auto& [name, value] : FlightRecorderEnv(socket_->directory(), [](const char* name) {
         return std::getenv(name) != nullptr;
       })) {
    if (!IsFlightRecorderPath(name)) env.emplace_back(name, value);
    launch_env.emplace_back(std::move(name), std::move(value));
  }
  WriteDcgmJobMapping(generation);
  absl::Status started = launcher_.Start(argv, launch_env);
  if (!started.ok()) {
    Do(state_->OnLaunchFailed(started.message()));  // said as the agent's error line
    return;
  }
  // The new generation goes up with its running launcher, never with the
  // last generation's end.
  batcher_.StartGeneration(generation, launcher_.status());
  provenance_ = CaptureProvenance(generation, argv, env, options_.provenance);
  v1::AgentMessage record;
  *record.mutable_provenance() = provenance_;
  link_->Send(std::move(record));
  TRAINSUP_LOG_INFO("job %s node %s: started generation %d (pid %d, reaper %d): %s",
                    options_.job, options_.node, generation, launcher_.pid(),
                    launcher_.reaper_pid(), why);
  if (launcher_.reaper_pid() == 0) {
    TRAINSUP_LOG_WARN("no reaper for generation %d: if the agent is killed, its ranks may "
                      "outlive it", generation);
  }
  PublishLauncher();
}

void Agent::NoteRendezvous(uint64_t generation, const v1::Rendezvous& rendezvous) {
  rendezvous_generation_ = generation;
  rendezvous_ = rendezvous;
}

void Agent::OnDatagrams() {
  const absl::Duration now = SteadyNow();
  bool watched_changed = false;
  const int count = socket_->DrainAvailable([&](const RankSocket::Datagram& d) {
    if (d.foreign_sender) {
      batcher_.CountReject(v1::REJECT_REASON_WRONG_SENDER);
      return;
    }
    const std::vector<absl::string_view> records = SplitRecords(d.payload);
    for (size_t i = 0; i < records.size(); ++i) {
      // A record in front of another rode on a later event's datagram (the
      // helper holds a STEP back until its next event): it is dated by
      // when it happened, by the rank's clock (the same as the agent's).
      const bool rode = i + 1 < records.size();
      OnRankRecord(records[i], now, &watched_changed, rode);
    }
  });
  drain_.Drained(now, count);
  if (watched_changed) PublishProcesses();
}

void Agent::OnRankRecord(absl::string_view record, absl::Duration now, bool* watched_changed,
                         bool rode) {
  std::variant<v1::RankHeartbeat, v1::RejectReason> decoded = DecodeHeartbeat(record);
  if (auto* reason = std::get_if<v1::RejectReason>(&decoded)) {
    batcher_.CountReject(*reason);
    return;
  }
  v1::RankHeartbeat& hb = std::get<v1::RankHeartbeat>(decoded);
  if (hb.kind() == v1::HEARTBEAT_KIND_PROVENANCE) return OnRankProvenance(hb);
  // Kept only for ranks that dropped something, and for at most so many
  // of them: the rank number is the sender's word, not yet validated.
  constexpr size_t kMaxRanksLogged = 4096;
  auto it = rank_drops_logged_.find(hb.rank());
  if (hb.datagrams_dropped() > 0 && it == rank_drops_logged_.end() &&
      rank_drops_logged_.size() < kMaxRanksLogged) {
    it = rank_drops_logged_.emplace(hb.rank(), 0).first;
  }
  if (it != rank_drops_logged_.end() && hb.datagrams_dropped() > it->second) {
    uint64_t& logged = it->second;
    TRAINSUP_LOG_WARN("rank %d: its helper gave up on %d datagram(s) so far (this socket's "
                      "queue was full: raise net.unix.max_dgram_qlen for many ranks a node)",
                      hb.rank(), hb.datagrams_dropped());
    logged = hb.datagrams_dropped();
  }
  *watched_changed |= watcher_.Observe(hb, state_->generation(), now);
  // The job a heartbeat names goes up only when it is not this agent's
  // (for the supervisor to refuse): 100k ranks' job names were ~10 MB/s.
  if (hb.job() == options_.job) hb.clear_job();
  const absl::Duration read_at = rode ? FailureTime(now, hb.monotonic_seconds()) : now;
  batcher_.AddHeartbeat(std::move(hb), read_at);
}

void Agent::OnRankProvenance(const v1::RankHeartbeat& hb) {
  if (!MergeRankProvenance(hb, &provenance_)) return;
  BoundProvenance(&provenance_);
  v1::AgentMessage record;
  *record.mutable_provenance() = provenance_;
  link_->Send(std::move(record));
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
    // the scheduler).
    Do(state_->OnStopSignal(SteadyNow(), signal));
  }
}

void Agent::OnSupervisorMessage(const v1::SupervisorMessage& m) {
  const absl::Duration now = SteadyNow();
  // A deposed leader's message (a lower epoch than one obeyed) is dropped,
  // whatever it says. Epoch 0 is a trainsupd without an election: alone.
  if (m.epoch() != 0) {
    if (m.epoch() < leader_epoch_) {
      ++stale_epoch_drops_;
      TRAINSUP_LOG_WARN("dropped a %s of leader epoch %d: epoch %d leads (%d dropped so far)",
                        BodyName(m), m.epoch(), leader_epoch_, stale_epoch_drops_);
      return;
    }
    leader_epoch_ = m.epoch();
  }
  switch (m.body_case()) {
    case v1::SupervisorMessage::kWelcome:
      if (m.welcome().has_rendezvous()) {
        NoteRendezvous(m.welcome().generation(), m.welcome().rendezvous());
      }
      resume_generation_ = m.welcome().generation();
      resume_ = m.welcome().resume();
      return Do(state_->OnWelcome(now, m.welcome().launch(), m.welcome().generation(),
                                  m.welcome().restarts()));
    case v1::SupervisorMessage::kStop:
      return Do(state_->OnStop(now, m.stop().generation(),
                               absl::Seconds(m.stop().grace_seconds()), m.stop().reason(),
                               m.stop().collect_stacks()));
    case v1::SupervisorMessage::kStart:
      if (m.start().has_rendezvous()) NoteRendezvous(m.start().generation(), m.start().rendezvous());
      resume_generation_ = m.start().generation();
      resume_ = m.start().resume();
      return Do(state_->OnStart(now, m.start().generation(), m.start().reason()));
    case v1::SupervisorMessage::kHold:
      return Do(state_->OnHold(now, m.hold().reason()));
    case v1::SupervisorMessage::kQuarantined:
      TRAINSUP_LOG_ERROR("this node is quarantined: %s", m.quarantined().reason());
      return Do(state_->OnQuarantined(now, m.quarantined().reason()));
    case v1::SupervisorMessage::kPlan:
      OnPlan(m.plan());
      return Do(state_->OnOtherMessage(now));
    case v1::SupervisorMessage::kSettings:  // the link obeys it
    case v1::SupervisorMessage::BODY_NOT_SET:
      return Do(state_->OnOtherMessage(now));
  }
}

void Agent::OnRefused(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    return Do(state_->OnNodeTaken(status.error_message()));
  }
  TRAINSUP_LOG_WARN("the supervisor refused this agent: %s", status.error_message());
}

void Agent::OnPlan(const v1::CheckpointPlan& plan) {
  const uint64_t held = plans_->held_through();
  absl::Status written = plans_->Add(plan);
  batcher_.SetPlansHeldThrough(plans_->held_through());
  if (!written.ok()) {
    TRAINSUP_LOG_ERROR("checkpoint plan %d: %s; retrying", plan.plan_id(), written.message());
    plan_retry_at_ = SteadyNow() + absl::Seconds(1);
    return;
  }
  if (plans_->held_through() == held) return;  // resent after a reconnect
  // Say so now, not at the next report: a plan the supervisor does not hear
  // held in time is revoked, and if this node is cut off between holding it
  // and saying so, its ranks keep a plan the others dropped (they disagree
  // on a checkpoint step). A report now shrinks that window to one trip.
  if (link_ != nullptr) link_->RequestReport();
  TRAINSUP_LOG_INFO("checkpoint plan %d: every %d steps from step %d%s", plan.plan_id(),
                    plan.interval_steps(), plan.effective_from_step(),
                    plan.one_off_steps_size() > 0
                        ? absl::StrCat(", one-off at step ", plan.one_off_steps(0))
                        : "");
}

void Agent::RetryPlanFile(absl::Duration now) {
  if (now < plan_retry_at_) return;
  absl::Status written = plans_->Rewrite();
  batcher_.SetPlansHeldThrough(plans_->held_through());
  if (written.ok()) {
    plan_retry_at_ = absl::InfiniteDuration();
    if (link_ != nullptr) link_->RequestReport();
    TRAINSUP_LOG_INFO("plan file written: plans held through %d", plans_->held_through());
    return;
  }
  TRAINSUP_LOG_ERROR("%s; retrying", written.message());
  plan_retry_at_ = now + absl::Seconds(1);
}

std::string Agent::StackPath(uint32_t rank) const {
  return absl::StrCat(socket_->directory(), "/stack-", rank, ".txt");
}

void Agent::BeginStackCollection(absl::Duration now, uint64_t generation) {
  // Heartbeats queued now may still name a rank's pid or stack signal.
  OnDatagrams();
  stacks_began_ = now;
  stacks_ = std::make_unique<StackCollection>(generation, watcher_.Snapshot());
  const NcclDumpPaths& dumps = nccl_dumps_;
  for (const StackCollection::Target& t : stacks_->targets()) {
    // The size first: what the rank appends after the signal is its answer.
    const int64_t size = FileSize(StackPath(t.rank));
    stacks_->Asked(t.rank, size, watcher_.Signal(t.rank, t.signal));
    // Its flight recorder's dump, when it has an NCCL group to record: the
    // collective each rank reached, written by torch's watchdog thread,
    // which runs when the rank's Python does not.
    const int64_t stamp = ModifiedNanos(dumps.DumpOf(t.rank));
    stacks_->AskedDump(t.rank, stamp, AskForNcclDump(dumps, t.rank));
  }
  ObserveStackFiles(now);
}

void Agent::ObserveStackFiles(absl::Duration now) {
  if (state_->phase() != AgentStateMachine::Phase::kCollecting) {
    FinishStackCollection();
    return;
  }
  for (uint32_t rank : stacks_->Pending(now)) {
    stacks_->Observe(rank, FileSize(StackPath(rank)), now);
  }
  if (std::vector<uint32_t> dumps = stacks_->PendingDumps(now); !dumps.empty()) {
    for (uint32_t rank : dumps) {
      stacks_->ObserveDump(rank, ModifiedNanos(nccl_dumps_.DumpOf(rank)), now);
    }
  }
  if (stacks_->Done(now)) Do(state_->OnStacksCollected(now));
}

void Agent::StartGpuWatch() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    cuda_visible_ = visible;
  }
  if (options_.gpu_health_interval > absl::ZeroDuration()) {
    GpuHealthPollerOptions health;
    health.nvidia_smi = options_.nvidia_smi;
    health.dcgm_url = options_.dcgm_exporter;
    health.interval = options_.gpu_health_interval;
    health_ = std::make_unique<GpuHealthPoller>(health);
    health_->Start();
  }
  const bool follow = !options_.kernel_log.empty() && options_.kernel_log != "none";
  if (follow) {
    absl::StatusOr<std::unique_ptr<KernelLogFollower>> log =
        KernelLogFollower::Open(options_.kernel_log);
    if (log.ok()) {
      kernel_log_ = std::move(*log);
    } else {
      TRAINSUP_LOG_INFO("GPU errors are not heard: the kernel log %s",
                        std::string(log.status().message()));
    }
  }
  // The GPU map names an Xid's GPU, and the GPUs of the job-mapping files.
  if (kernel_log_ == nullptr && options_.dcgm_job_mapping_dir.empty()) return;
  if (options_.nvidia_smi.empty() || options_.nvidia_smi == "none") return;
  BoundedRunOptions run;
  run.timeout = kNvidiaSmiTimeout;
  run.max_output = 64 * 1024;
  run.merge_stderr = false;
  std::vector<std::string> argv = {options_.nvidia_smi};
  for (absl::string_view arg : absl::StrSplit(kGpuQueryArgs, ' ')) argv.emplace_back(arg);
  const BoundedRunResult smi = RunBounded(argv, run);
  absl::StatusOr<std::vector<GpuInfo>> gpus =
      smi.succeeded() ? ParseGpuQuery(smi.output)
                      : absl::UnavailableError(smi.spawn_error != 0 ? strerror(smi.spawn_error)
                                                                    : "did not exit 0 in time");
  const std::string following =
      kernel_log_ != nullptr ? kernel_log_->path() : std::string("no kernel log");
  if (!gpus.ok()) {
    TRAINSUP_LOG_INFO("following %s; no GPU map from %s (%s): errors name the PCI address",
                      following, options_.nvidia_smi, std::string(gpus.status().message()));
    return;
  }
  TRAINSUP_LOG_INFO("following %s for GPU errors; %d GPUs from %s", following, gpus->size(),
                    options_.nvidia_smi);
  gpus_ = GpuInventory(*std::move(gpus));
}

void Agent::OnKernelLine(absl::string_view line) {
  PciAddress pci;
  std::string uuid;
  if (ParseGpuAtLine(line, &pci, &uuid)) {
    gpus_.NoteUuid(pci, uuid);
    return;
  }
  XidRecord xid;
  switch (ParseKernelLine(line, &xid)) {
    case KernelLineKind::kOther:
      return;
    case KernelLineKind::kGarbled:
    case KernelLineKind::kTooLong:
      ++kernel_lines_refused_;
      TRAINSUP_LOG_DEBUG("a kernel log line that is no Xid in the driver's form (%d so far)",
                         kernel_lines_refused_);
      return;
    case KernelLineKind::kXid:
      break;
  }
  const absl::Duration now = SteadyNow();
  const std::string address = xid.pci ? xid.pci->ToString() : "";
  if (xid_sent_.size() >= kMaxXidsRemembered) {  // a storm of distinct codes: start over
    xid_sent_.clear();
  }
  auto [sent, fresh] = xid_sent_.try_emplace({xid.code, address}, now);
  if (!fresh && now - sent->second < kXidResendInterval) {
    ++xids_suppressed_;
    return;
  }
  sent->second = now;
  const GpuInfo gpu = xid.pci ? gpus_.At(*xid.pci) : GpuInfo();
  // The ranks of the current generation on this node, by local rank.
  const std::vector<ProcessObservation> processes = watcher_.Snapshot();
  const uint32_t local_ranks = LocalRankCount(processes);
  v1::AgentMessage message;
  v1::GpuError* e = message.mutable_gpu_error();
  e->set_generation(state_->generation());
  e->set_xid(xid.code);
  e->set_pci_bus_id(address);
  e->set_gpu_index(gpu.index);
  e->set_gpu_uuid(gpu.uuid);
  for (uint32_t local : LocalRanksOnGpu(gpu, cuda_visible_, local_ranks)) {
    e->add_local_ranks(local);
    for (const ProcessObservation& p : processes) {
      if (p.process.local_rank() == local) e->add_ranks(p.process.rank());
    }
  }
  e->set_pid(xid.pid.value_or(0));
  e->set_process(xid.process);
  e->set_message(xid.message);
  TRAINSUP_LOG_WARN("Xid %d on GPU %d (%s): %s", xid.code, gpu.index,
                    address.empty() ? "no address" : address, xid.message);
  link_->Send(std::move(message));
}

uint32_t Agent::LocalRankCount(const std::vector<ProcessObservation>& processes) const {
  uint32_t local_ranks = 0;
  for (const ProcessObservation& p : processes) {
    local_ranks = std::max(local_ranks, p.process.local_rank() + 1);
  }
  return local_ranks;
}

void Agent::SendGpuHealth(absl::Duration now) {
  if (health_ == nullptr || now - health_checked_ < kGpuHealthCheckInterval) return;
  health_checked_ = now;
  const std::vector<ProcessObservation> processes = watcher_.Snapshot();
  const std::pair<uint64_t, size_t> ranks = {state_->generation(), processes.size()};
  std::optional<GpuHealthReading> reading = health_->TakeChanged(ranks != health_ranks_sent_);
  if (!reading) return;
  health_ranks_sent_ = ranks;
  const uint32_t local_ranks = LocalRankCount(processes);
  v1::AgentMessage message;
  v1::GpuHealthReport* report = message.mutable_gpu_health();
  report->set_generation(state_->generation());
  report->set_source(reading->source);
  for (const GpuHealth& g : reading->gpus) {
    if (report->gpus_size() >= static_cast<int>(kMaxGpusReported)) break;
    v1::GpuHealthSample* out = report->add_gpus();
    out->set_index(g.index);
    out->set_uuid(g.uuid);
    out->set_pci_bus_id(g.pci_bus_id);
    if (g.clock_event_reasons) out->set_clock_event_reasons(*g.clock_event_reasons);
    if (g.temperature_c) out->set_temperature_c(*g.temperature_c);
    if (g.pcie_replays) out->set_pcie_replays(*g.pcie_replays);
    if (g.ecc_uncorrectable) out->set_ecc_uncorrectable(*g.ecc_uncorrectable);
    if (g.uncorrectable_remapped_rows) {
      out->set_uncorrectable_remapped_rows(*g.uncorrectable_remapped_rows);
    }
    if (g.row_remap_failure) out->set_row_remap_failure(*g.row_remap_failure);
    if (g.row_remap_pending) out->set_row_remap_pending(*g.row_remap_pending);
    if (g.last_xid) out->set_last_xid(*g.last_xid);
    GpuInfo gpu;
    gpu.index = g.index;
    gpu.uuid = g.uuid;
    for (uint32_t local : LocalRanksOnGpu(gpu, cuda_visible_, local_ranks)) {
      out->add_local_ranks(local);
      for (const ProcessObservation& p : processes) {
        if (p.process.local_rank() == local) out->add_ranks(p.process.rank());
      }
    }
    if (const std::string slowing = SlowingReasonsText(g.clock_event_reasons.value_or(0));
        !slowing.empty()) {
      TRAINSUP_LOG_INFO("GPU %d (%s): %s", g.index, g.pci_bus_id, slowing);
    }
  }
  link_->Send(std::move(message));
}

void Agent::WriteDcgmJobMapping(uint64_t generation) {
  if (options_.dcgm_job_mapping_dir.empty()) return;
  job_mapping_gpus_ = JobGpuIndices(cuda_visible_, gpus_.gpus());
  if (job_mapping_gpus_.empty()) {
    TRAINSUP_LOG_WARN("dcgm job mapping: no GPU known (no nvidia-smi map, no "
                      "CUDA_VISIBLE_DEVICES): nothing written");
    return;
  }
  absl::Status written =
      WriteJobMapping(options_.dcgm_job_mapping_dir, job_mapping_gpus_, options_.job);
  if (!written.ok()) {
    TRAINSUP_LOG_WARN("dcgm job mapping: %s", std::string(written.message()));
    return;
  }
  TRAINSUP_LOG_INFO("dcgm job mapping: GPUs %s run job %s (generation %d) in %s",
                    absl::StrJoin(job_mapping_gpus_, ","), options_.job, generation,
                    options_.dcgm_job_mapping_dir);
}

void Agent::RunPreflight() {
  if (options_.preflight.empty()) return;
  TRAINSUP_LOG_INFO("preflight: running %s (at most %s)", options_.preflight,
                    absl::FormatDuration(options_.preflight_timeout));
  BoundedRunOptions run;
  run.timeout = options_.preflight_timeout;
  run.max_output = 1 << 20;  // the tail is what goes up: a check says why at its end
  run.merge_stderr = true;
  const absl::Duration start = SteadyNow();
  const BoundedRunResult ran = RunBounded({"/bin/sh", "-c", options_.preflight}, run);
  v1::PreflightResult result;
  result.set_passed(ran.succeeded());
  result.set_exit_code(ran.reaped && WIFEXITED(ran.status) ? WEXITSTATUS(ran.status) : -1);
  result.set_timed_out(ran.timed_out);
  result.set_seconds(absl::ToDoubleSeconds(SteadyNow() - start));
  const size_t tail = std::min<size_t>(ran.output.size(), kPreflightOutputBytes);
  result.set_output(StackText(absl::string_view(ran.output).substr(ran.output.size() - tail)));
  if (result.passed()) {
    TRAINSUP_LOG_INFO("preflight passed in %.1fs", result.seconds());
  } else {
    TRAINSUP_LOG_ERROR("preflight failed (%s after %.1fs): this node will not join; its output:\n%s",
                       ran.timed_out ? "its time limit"
                       : ran.spawn_error != 0 ? strerror(ran.spawn_error)
                                              : absl::StrCat("exit code ", result.exit_code()),
                       result.seconds(), result.output());
  }
  preflight_ = std::move(result);
}

void Agent::AddFlightRecord(const std::string& path, v1::RankStack* stack) {
  // Past the reader's bound it is refused unread: one byte more says so.
  const int64_t size = std::min<int64_t>(FileSize(path), kMaxFlightRecordBytes + 1);
  absl::StatusOr<FlightRecord> record = ReadFlightRecord(ReadRange(path, 0, size));
  if (!record.ok()) {
    stack->set_flight_record_error(std::string(record.status().message()).substr(0, 512));
    TRAINSUP_LOG_WARN("the flight recorder's dump %s is not read: %s", path,
                      std::string(record.status().message()));
    return;
  }
  ToProto(*record, kMaxFlightRecordGroupsSent, kMaxFlightRecordOpsSent,
          stack->mutable_flight_record());
}

void Agent::FinishStackCollection() {
  std::unique_ptr<StackCollection> stacks = std::move(stacks_);
  v1::AgentMessage message;
  v1::StacksReport* report = message.mutable_stacks();
  report->set_generation(stacks->generation());
  int answered = 0;
  int dumps = 0;
  for (const StackCollection::Result& r : stacks->Results()) {
    v1::RankStack* stack = report->add_stacks();
    if (r.dumped) {
      ++dumps;
      AddFlightRecord(nccl_dumps_.DumpOf(r.rank), stack);
    }
    stack->set_rank(r.rank);
    stack->set_local_rank(r.local_rank);
    stack->set_pid(r.pid);
    stack->set_answered(r.answered);
    if (r.answered) {
      stack->set_text(StackText(ReadRange(StackPath(r.rank), r.offset, r.length)));
      ++answered;
    }
  }
  // Until the last stack read.
  const absl::Duration took = SteadyNow() - stacks_began_;
  report->set_collect_seconds(absl::ToDoubleSeconds(took));
  TRAINSUP_LOG_INFO("stacks of generation %d: %d of %d ranks answered in %s%s",
                    stacks->generation(), answered, report->stacks_size(),
                    absl::FormatDuration(took),
                    dumps > 0 ? absl::StrCat("; ", dumps, " NCCL flight recorder dumps") : "");
  link_->Send(std::move(message));
}

void Agent::OnCommandEnded() {
  // Take the ranks' last words (an exception report is sent just before a
  // rank exits), note every death, and leave no process of the group behind.
  const absl::Duration now = SteadyNow();
  OnDatagrams();
  watcher_.CheckExits(now);
  launcher_.EndGroup();
  // The rest of what the group wrote to stderr: it is gone, so the pipe
  // ends at once (unless a process outside the group holds it).
  launcher_.AwaitStderr(kStderrDrainTime);
  NoteRankStderr(absl::ZeroDuration());
  const v1::LauncherStatus& status = launcher_.status();
  if (status.exit_code() != 0 || status.signal() != 0) {
    const std::deque<std::string> tail = launcher_.StderrTail();
    failure_lines_ = StderrExcerpt(tail);
  }
  PublishProcesses();
  PublishLauncher();
  TRAINSUP_LOG_INFO("generation %d ended with %s; %d heartbeats forwarded so far",
                    state_->generation(),
                    ExitStatusText(true, status.exit_code(), status.signal()),
                    batcher_.heartbeats_added());
  Do(state_->OnCommandEnded(now, CommandEnd{status.exit_code(), status.signal()},
                            link_->connected()));
}

int Agent::Run() {
  // Orphaned ranks (their torchrun died first) become our children, so that
  // we reap them and no zombie outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t signals = AgentSignals();
  const int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0 || inbox_.fd() < 0) {
    std::fprintf(stderr, "error: signalfd/eventfd: %s\n", strerror(errno));
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<RankSocket>> socket = RankSocket::Open(options_.socket_parent);
  if (!socket.ok()) {
    std::fprintf(stderr, "error: cannot open the rank socket: %s\n",
                 std::string(socket.status().message()).c_str());
    close(signal_fd);
    return kExitFailure;
  }
  socket_ = std::move(*socket);
  plans_ = std::make_unique<PlanFile>(socket_->directory() + "/plans.json");
  nccl_dumps_ = NcclDumpPathsFor(socket_->directory());

  // Before the first hello: a node whose check fails says so in it.
  RunPreflight();
  LinkOptions link_options;
  link_options.address = options_.supervisor;
  link_options.tls = options_.tls;
  link_options.report_interval = options_.report_interval;
  link_options.backoff_max = options_.reconnect_max;
  link_ = std::make_unique<SupervisorLink>(
      link_options, &batcher_, [this] { return Hello(); },
      [this](const v1::SupervisorMessage& m) { inbox_.Push(m); },
      [this](const grpc::Status& refusal) { inbox_.Push(refusal); });
  v1::LauncherStatus waiting;
  waiting.set_state(v1::LauncherStatus::STATE_WAITING);
  batcher_.SetLauncher(waiting);
  link_->Start();
  state_ = std::make_unique<AgentStateMachine>(options_.timeouts, SteadyNow());
  StartGpuWatch();
  TRAINSUP_LOG_INFO("job %s node %s: rank socket %s; waiting for the supervisor at %s",
                    options_.job, options_.node, socket_->path(), options_.supervisor);

  while (!done()) {
    const bool wait_on_socket = drain_.WaitOnSocket(SteadyNow());
    int timeout_ms = stacks_ != nullptr ? kCollectingPollMs : kPollMs;
    if (!wait_on_socket) {
      timeout_ms = std::min<int64_t>(
          timeout_ms, absl::ToInt64Milliseconds(absl::Ceil(drain_.UntilDrain(SteadyNow()),
                                                           absl::Milliseconds(1))));
    }
    // A negative descriptor is left out by poll.
    std::vector<pollfd> fds = {{signal_fd, POLLIN, 0},
                               {wait_on_socket ? socket_->fd() : -1, POLLIN, 0},
                               {inbox_.fd(), POLLIN, 0}};
    for (int fd : watcher_.LiveFds()) fds.push_back({fd, POLLIN, 0});
    poll(fds.data(), fds.size(), timeout_ms);
    if (drain_.DrainDue(SteadyNow(), fds[1].revents != 0)) OnDatagrams();
    if (fds[0].revents != 0) OnSignals(signal_fd);
    if (fds[2].revents != 0) {
      for (const LinkEvent& event : inbox_.TakeAll()) {
        if (done()) break;
        if (const auto* m = std::get_if<v1::SupervisorMessage>(&event)) {
          OnSupervisorMessage(*m);
        } else {
          OnRefused(std::get<grpc::Status>(event));
        }
      }
    }
    const absl::Duration now = SteadyNow();
    if (watcher_.CheckExits(now)) PublishProcesses();
    // torchrun copies a rank's stderr into its own a moment after it was
    // written (--tee): look again for a while after a silent death.
    NoteRankStderr(now - kStderrDrainTime * 10);
    if (stacks_ != nullptr) ObserveStackFiles(now);
    if (kernel_log_ != nullptr) {
      kernel_log_->Poll([this](absl::string_view line) { OnKernelLine(line); });
    }
    SendGpuHealth(now);
    RetryPlanFile(now);
    Do(state_->Tick(now));
  }

  if (launcher_.running()) {  // e.g. quarantined or failing while running
    launcher_.SignalGroup(SIGKILL);
    while (launcher_.running() && !launcher_.ReapChildren()) poll(nullptr, 0, 10);
    PublishLauncher();
  }
  launcher_.EndGroup();
  // The last report says how the command ended: the supervisor must have
  // read it before the agent goes (a stream cut at once loses what the
  // supervisor had not read yet, and the job would show running for good).
  // An agent no supervisor ever welcomed has nobody to wait for.
  if (!link_->Close(link_->sessions() > 0 ? kFinalReportTimeout : absl::ZeroDuration()) &&
      link_->sessions() > 0) {
    TRAINSUP_LOG_WARN("the supervisor did not confirm the final report within %s",
                      absl::FormatDuration(kFinalReportTimeout));
  }
  close(signal_fd);
  if (!job_mapping_gpus_.empty()) {  // the GPUs no longer run this job
    RemoveJobMapping(options_.dcgm_job_mapping_dir, job_mapping_gpus_, options_.job);
  }
  const int exit_code = *state_->exit_code();
  TRAINSUP_LOG_INFO("exiting with code %d", exit_code);
  return exit_code;
}

}  // namespace trainsup
