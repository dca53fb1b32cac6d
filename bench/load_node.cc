#include "bench/load_node.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/log.h"

namespace trainsup {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// A node that fell behind (its stream was down) catches up over several
// reports, as the agent's batcher does with its byte limit.
constexpr int64_t kMaxEventsPerRankPerReport = 512;

int64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerS + ts.tv_nsec;
}

// The schedule is in wall time (shared by all processes); the heartbeats
// carry the rank's CLOCK_MONOTONIC, as the Python helper does.
int64_t MonotonicMinusWallNs() { return ClockNs(CLOCK_MONOTONIC) - ClockNs(CLOCK_REALTIME); }

}  // namespace

int64_t WallNowNs() { return ClockNs(CLOCK_REALTIME); }

std::string NodeName(int index) { return absl::StrFormat("load-n%05d", index); }

StepSchedule::StepSchedule(double step_rate, bool phases)
    : period_ns_(std::max<int64_t>(1'000'000, static_cast<int64_t>(kNsPerS / step_rate))),
      compute_ns_(period_ns_ * 8 / 10),
      phases_(phases) {}

int64_t StepSchedule::Offset(uint32_t rank) const {
  // Knuth's multiplicative hash: neighbouring ranks land far apart in the
  // period, and every process computes the same offset.
  const uint64_t h = (static_cast<uint64_t>(rank) * 2654435761u) & 0xffffffffu;
  return static_cast<int64_t>((static_cast<unsigned __int128>(h) * period_ns_) >> 32);
}

int64_t StepSchedule::EventsThrough(int64_t origin_ns, uint32_t rank, int64_t t_ns) const {
  const int64_t start = origin_ns + Offset(rank);
  if (t_ns < start) return 0;
  const int64_t d = t_ns - start;
  const int64_t steps = d / period_ns_;
  if (!phases_) return steps;
  return 1 + 3 * steps + (d - steps * period_ns_ >= compute_ns_ ? 1 : 0);
}

int64_t StepSchedule::EventsBeforeHang(int64_t origin_ns, uint32_t hung, int64_t fault_ns,
                                       bool is_hung) const {
  const int64_t start = origin_ns + Offset(hung);
  const int64_t steps = fault_ns < start ? 0 : (fault_ns - start) / period_ns_;
  if (!phases_) return steps;
  return 3 * steps + (is_hung ? 1 : 2);
}

StepSchedule::Event StepSchedule::EventAt(int64_t origin_ns, uint32_t rank, int64_t index) const {
  const int64_t start = origin_ns + Offset(rank);
  if (!phases_) return {v1::HEARTBEAT_KIND_STEP, index, start + (index + 1) * period_ns_};
  if (index == 0) return {v1::HEARTBEAT_KIND_COMPUTE_BEGIN, 0, start};
  const int64_t step = (index - 1) / 3;
  const int64_t step_start = start + step * period_ns_;
  switch ((index - 1) % 3) {
    case 0:
      return {v1::HEARTBEAT_KIND_COMPUTE_END, step, step_start + compute_ns_};
    case 1:
      return {v1::HEARTBEAT_KIND_STEP, step, step_start + period_ns_};
    default:
      return {v1::HEARTBEAT_KIND_COMPUTE_BEGIN, step + 1, step_start + period_ns_};
  }
}

int64_t StepSchedule::StepDoneAt(int64_t origin_ns, uint32_t rank, int64_t step) const {
  return origin_ns + Offset(rank) + (step + 1) * period_ns_;
}

// One stream of one node (gRPC's callback API: no thread of its own). It
// keeps itself alive until gRPC is done with it (self_), and holds the call
// open (a hold) while the node may still write on it.
class LoadNode::Session
    : public grpc::ClientBidiReactor<v1::AgentMessage, v1::SupervisorMessage> {
 public:
  static std::shared_ptr<Session> Open(LoadNode* node, v1::AgentService::Stub* stub,
                                       v1::AgentMessage hello) {
    std::shared_ptr<Session> s(new Session(node, std::move(hello)));
    s->self_ = s;
    stub->async()->Connect(&s->context_, s.get());
    s->AddHold();
    s->StartRead(&s->in_);
    s->StartWrite(&s->hello_);
    {
      std::lock_guard<std::mutex> lock(node->mu_);
      node->session_ = s;
    }
    s->StartCall();
    return s;
  }

  void Write(const v1::AgentMessage* m) { StartWrite(m); }
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (ok) {
      node_->OnMessage(in_);
      StartRead(&in_);
      return;
    }
    if (node_->OnReadEnded()) RemoveHold();
  }
  void OnWriteDone(bool ok) override {
    if (node_->WriteDone(ok)) RemoveHold();
  }
  void OnDone(const grpc::Status& status) override {
    node_->OnSessionDone(status);
    self_.reset();  // may delete this: the last statement
  }

 private:
  Session(LoadNode* node, v1::AgentMessage hello) : node_(node), hello_(std::move(hello)) {}

  LoadNode* const node_;
  grpc::ClientContext context_;
  v1::AgentMessage hello_;
  v1::SupervisorMessage in_;
  std::shared_ptr<Session> self_;
};

LoadNode::LoadNode(LoadDriver* driver, int index)
    : driver_(driver),
      index_(index),
      name_(NodeName(index)),
      incarnation_(std::mt19937_64(std::random_device{}())()),
      interval_ns_(static_cast<int64_t>(driver->config().report_interval_s * kNsPerS)) {}

LoadNode::~LoadNode() = default;

void LoadNode::FillHello(v1::AgentHello* hello) const {
  const LoadConfig& c = driver_->config();
  hello->set_node(name_);
  hello->set_job(c.job);
  hello->set_incarnation(incarnation_);
  hello->set_generation(generation_);
  hello->set_agent_version("agent_load");
  hello->set_report_interval_seconds(c.report_interval_s);
  v1::LauncherStatus* l = hello->mutable_launcher();
  l->set_state(running_    ? v1::LauncherStatus::STATE_RUNNING
               : launched_ ? v1::LauncherStatus::STATE_EXITED
                           : v1::LauncherStatus::STATE_WAITING);
  for (const v1::CheckpointPlan& p : plans_) *hello->add_plans() = p;
}

int64_t LoadNode::Tick(int64_t now_ns) {
  std::shared_ptr<Session> session;
  int64_t next = now_ns + interval_ns_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || (quarantined_ && session_ == nullptr)) return kNever;
    if (session_ == nullptr) {
      if (now_ns < reconnect_at_ns_) return reconnect_at_ns_;
      writing_ = true;  // the hello
      in_flight_heartbeats_ = 0;
      in_flight_is_report_ = false;
      session_alive_ = true;
      welcomed_ = false;
    } else if (!session_alive_ || !welcomed_) {
      return next;
    } else if (writing_) {
      // The previous report is not written yet (flow control): its
      // successor waits, and will carry the heartbeats of both.
      driver_->counters_.reports_late.fetch_add(1, std::memory_order_relaxed);
      return now_ns + interval_ns_ / 4;
    } else if (stacks_pending_) {
      BuildStacksLocked();
      stacks_pending_ = false;
      writing_ = true;
      in_flight_heartbeats_ = 0;
      in_flight_is_report_ = false;
      session = session_;
      next = now_ns + 1'000'000;  // the report right after
    } else {
      in_flight_heartbeats_ = BuildReportLocked(now_ns);
      in_flight_is_report_ = true;
      writing_ = true;
      session = session_;
    }
    if (quarantined_ && session != nullptr) next = kNever;
  }
  if (session == nullptr) {
    // A new stream (gRPC calls are made outside mu_: their callbacks may
    // run inline and take it).
    v1::AgentMessage hello;
    {
      std::lock_guard<std::mutex> lock(mu_);
      FillHello(hello.mutable_hello());
    }
    driver_->live_sessions_.fetch_add(1);
    driver_->counters_.sessions.fetch_add(1, std::memory_order_relaxed);
    Session::Open(this, driver_->StubFor(index_), std::move(hello));
    return next;
  }
  session->Write(&out_);
  return next;
}

void LoadNode::Cancel() {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    session = session_;
  }
  if (session != nullptr) session->Cancel();
}

double LoadNode::interval_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<double>(interval_ns_) / kNsPerS;
}

void LoadNode::OnMessage(const v1::SupervisorMessage& m) {
  const int64_t now = WallNowNs();
  LoadCounters& counters = driver_->counters_;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto apply_settings = [this](const v1::AgentSettings& s) {
      if (s.report_interval_seconds() > 0) {
        interval_ns_ = static_cast<int64_t>(s.report_interval_seconds() * kNsPerS);
      }
    };
    switch (m.body_case()) {
      case v1::SupervisorMessage::kWelcome:
        welcomed_ = true;
        resend_latest_ = ever_welcomed_;
        if (!ever_welcomed_) {
          ever_welcomed_ = true;
          counters.nodes_welcomed.fetch_add(1);
        }
        apply_settings(m.welcome().settings());
        // The first generation steps on the common schedule (origin 0).
        if (!launched_ && m.welcome().launch()) {
          LaunchLocked(std::max<uint64_t>(1, m.welcome().generation()), 0);
        }
        break;
      case v1::SupervisorMessage::kStop:
        if (running_ && generation_ <= m.stop().generation()) {
          StopLocked(m.stop().collect_stacks());
          counters.stops.fetch_add(1);
          wake = true;
        }
        break;
      case v1::SupervisorMessage::kStart:
        if (!running_) {
          LaunchLocked(m.start().generation(), now);
          counters.starts.fetch_add(1);
          wake = true;
        }
        break;
      case v1::SupervisorMessage::kPlan:
        // Held at once (the agent writes its plan file); the next report says so.
        if (m.plan().plan_id() > plans_held_through_) {
          plans_.push_back(m.plan());
          plans_held_through_ = m.plan().plan_id();
          counters.plans.fetch_add(1);
        }
        break;
      case v1::SupervisorMessage::kSettings:
        apply_settings(m.settings());
        break;
      case v1::SupervisorMessage::kQuarantined:
        if (running_) StopLocked(false);
        quarantined_ = true;  // one last report, then the agent exits
        wake = true;
        break;
      case v1::SupervisorMessage::kHold:
      case v1::SupervisorMessage::BODY_NOT_SET:
        break;
    }
  }
  if (wake) driver_->Wake(index_);
}

bool LoadNode::WriteDone(bool ok) {
  std::shared_ptr<Session> cancel;
  bool release = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    LoadCounters& counters = driver_->counters_;
    if (ok && in_flight_is_report_) {
      counters.reports_sent.fetch_add(1, std::memory_order_relaxed);
      counters.heartbeats_sent.fetch_add(in_flight_heartbeats_, std::memory_order_relaxed);
    } else if (!ok) {
      counters.write_failures.fetch_add(1, std::memory_order_relaxed);
      if (in_flight_is_report_ && report_generation_ == generation_) {
        events_sent_ = events_before_report_;
      }
    }
    in_flight_heartbeats_ = 0;
    release = !session_alive_;
    if (quarantined_ && session_alive_ && in_flight_is_report_) cancel = session_;
  }
  if (cancel != nullptr) cancel->Cancel();
  return release;
}

bool LoadNode::OnReadEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  session_alive_ = false;
  welcomed_ = false;
  return !writing_;  // else the write's completion releases the call
}

void LoadNode::OnSessionDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_.reset();
    session_alive_ = false;
    welcomed_ = false;
    writing_ = false;
    if (!cancelled_) {
      // The first few say why streams end (the supervisor's refusal, or a
      // keepalive that timed out under CPU starvation).
      if (driver_->counters_.sessions_ended.fetch_add(1) < 3) {
        TRAINSUP_LOG_WARN("node %s: stream ended: %d %s", name_, status.error_code(),
                          status.error_message());
      }
      // Back in 1-2 s, jittered, as the agent's backoff starts.
      std::minstd_rand rng(static_cast<uint32_t>(incarnation_ ^ WallNowNs()));
      reconnect_at_ns_ = WallNowNs() + kNsPerS + static_cast<int64_t>(rng() % kNsPerS);
    }
  }
  driver_->live_sessions_.fetch_sub(1);
}

void LoadNode::LaunchLocked(uint64_t generation, int64_t origin_ns) {
  first_generation_ = !launched_;
  launched_ = true;
  running_ = true;
  generation_ = generation;
  origin_ns_ = origin_ns;
  events_sent_.assign(static_cast<size_t>(driver_->config().ranks_per_node), 0);
  start_pending_ = true;
}

void LoadNode::StopLocked(bool collect_stacks) {
  // The agent SIGTERMs the command's group; the ranks die of it.
  running_ = false;
  stopped_at_ns_ = WallNowNs();
  stacks_pending_ = collect_stacks;
}

int64_t LoadNode::FaultAtLocked(uint32_t local_rank) const {
  const LoadConfig& c = driver_->config();
  const int64_t rank = static_cast<int64_t>(index_) * c.ranks_per_node + local_rank;
  const int64_t fault = driver_->fault_ns();
  if (!first_generation_ || fault == 0 || (rank != c.hang_rank && rank != c.kill_rank)) {
    return kNever;
  }
  return fault;
}

uint64_t LoadNode::BuildReportLocked(int64_t now_ns) {
  const LoadConfig& c = driver_->config();
  const StepSchedule& schedule = driver_->schedule();
  const double period_s = static_cast<double>(schedule.period_ns()) / kNsPerS;
  v1::NodeReport* r = out_.mutable_report();
  r->set_sequence(++sequence_);
  r->set_generation(generation_);
  v1::LauncherStatus* launcher = r->mutable_launcher();
  launcher->set_state(running_    ? v1::LauncherStatus::STATE_RUNNING
                      : launched_ ? v1::LauncherStatus::STATE_EXITED
                                  : v1::LauncherStatus::STATE_WAITING);
  launcher->set_pid(launched_ ? static_cast<uint32_t>(500 + index_ % 100000) : 0);
  launcher->set_signal(launched_ && !running_ ? SIGTERM : 0);
  r->set_plans_held_through(plans_held_through_);
  // Cleared, not freed: the next Add reuses the same objects.
  r->mutable_heartbeats()->Clear();
  uint64_t count = 0;
  if (resend_latest_) {
    // The last few events of each rank hold its latest STEP and phase;
    // resent state is idempotent at the supervisor (a step may repeat).
    const int64_t back = c.phases ? 3 : 1;
    for (int64_t& sent : events_sent_) sent = std::max<int64_t>(0, sent - back);
    resend_latest_ = false;
  }
  events_before_report_ = events_sent_;
  report_generation_ = generation_;
  const int64_t origin = origin_ns_ != 0 ? origin_ns_ : driver_->origin_ns();
  const int64_t upto = running_ ? now_ns : stopped_at_ns_;
  const int64_t mono_offset = driver_->mono_minus_wall_ns_;
  for (int i = 0; launched_ && i < c.ranks_per_node; ++i) {
    const uint32_t rank = static_cast<uint32_t>(index_ * c.ranks_per_node + i);
    auto add = [&](v1::HeartbeatKind kind, int64_t step, int64_t at_ns) {
      v1::RankHeartbeat* hb = r->add_heartbeats();
      hb->set_kind(kind);  // no job: an agent leaves out its own (heartbeat.proto)
      hb->set_rank(rank);
      hb->set_local_rank(static_cast<uint32_t>(i));
      hb->set_world_size(c.world_size());
      hb->set_pid(static_cast<uint32_t>(1000 + (generation_ * c.world_size() + rank) % 4000000));
      hb->set_step(step);
      hb->set_generation(generation_);
      hb->set_monotonic_seconds(static_cast<double>(at_ns + mono_offset) / kNsPerS);
      // As an agent does: how long it held the heartbeat (read at its making).
      hb->set_queued_seconds(static_cast<double>(std::max<int64_t>(0, now_ns - at_ns)) / kNsPerS);
      if (kind == v1::HEARTBEAT_KIND_STEP) {
        hb->set_step_duration_seconds(period_s);
        hb->set_data_wait_seconds(period_s / 100);
        hb->set_compute_seconds(period_s * 0.8);
      }
      ++count;
    };
    if (start_pending_) add(v1::HEARTBEAT_KIND_START, 0, now_ns);
    if (origin == 0) continue;  // not told to go yet
    // A killed rank produces nothing after its death; a hang stops the job.
    int64_t through =
        schedule.EventsThrough(origin, rank, std::min(upto, FaultAtLocked(static_cast<uint32_t>(i))));
    if (first_generation_ && c.hang_rank >= 0 && driver_->fault_ns() != 0) {
      through = std::min(through, schedule.EventsBeforeHang(origin, static_cast<uint32_t>(c.hang_rank),
                                                            driver_->fault_ns(), rank == c.hang_rank));
    }
    int64_t& sent = events_sent_[static_cast<size_t>(i)];
    const int64_t last = std::min(through, sent + kMaxEventsPerRankPerReport);
    for (; sent < last; ++sent) {
      const StepSchedule::Event e = schedule.EventAt(origin, rank, sent);
      add(e.kind, e.step, e.at_ns);
    }
  }
  start_pending_ = false;
  FillProcessesLocked(now_ns);
  return count;
}

void LoadNode::FillProcessesLocked(int64_t now_ns) {
  const LoadConfig& c = driver_->config();
  auto* processes = out_.mutable_report()->mutable_processes();
  if (!launched_) {
    processes->Clear();
    return;
  }
  while (processes->size() < c.ranks_per_node) processes->Add();
  for (int i = 0; i < c.ranks_per_node; ++i) {
    const uint32_t rank = static_cast<uint32_t>(index_ * c.ranks_per_node + i);
    v1::RankProcess* p = processes->Mutable(i);
    p->set_rank(rank);
    p->set_local_rank(static_cast<uint32_t>(i));
    p->set_pid(static_cast<uint32_t>(1000 + (generation_ * c.world_size() + rank) % 4000000));
    p->set_generation(generation_);
    // As the agent reads a death from the zombie: killed (SIGKILL) by the
    // fault, or ended by the stop's SIGTERM.
    const bool killed = rank == c.kill_rank && FaultAtLocked(static_cast<uint32_t>(i)) <= now_ns &&
                        (running_ || FaultAtLocked(static_cast<uint32_t>(i)) <= stopped_at_ns_);
    const bool alive = running_ && !killed;
    p->set_alive(alive);
    p->set_exit_known(!alive);
    p->set_exit_code(0);
    p->set_signal(alive ? 0 : killed ? SIGKILL : SIGTERM);
    const int64_t died = killed ? FaultAtLocked(static_cast<uint32_t>(i)) : stopped_at_ns_;
    p->set_died_seconds_ago(alive ? 0.0 : static_cast<double>(now_ns - died) / kNsPerS);
  }
}

void LoadNode::BuildStacksLocked() {
  // No Python here to answer: every rank "wrote nothing in time", which the
  // supervisor takes as it takes a rank stuck where no signal handler runs.
  const LoadConfig& c = driver_->config();
  v1::StacksReport* s = out_.mutable_stacks();
  s->Clear();
  s->set_generation(generation_);
  s->set_collect_seconds(0);
  for (int i = 0; i < c.ranks_per_node; ++i) {
    v1::RankStack* stack = s->add_stacks();
    stack->set_rank(static_cast<uint32_t>(index_ * c.ranks_per_node + i));
    stack->set_local_rank(static_cast<uint32_t>(i));
    stack->set_answered(false);
  }
}

LoadDriver::LoadDriver(LoadConfig config, int first, int last)
    : config_(std::move(config)),
      schedule_(config_.step_rate, config_.phases),
      first_(first),
      last_(last),
      mono_minus_wall_ns_(MonotonicMinusWallNs()) {
  for (int i = first; i < last; ++i) nodes_.push_back(std::make_unique<LoadNode>(this, i));
}

LoadDriver::~LoadDriver() { Shutdown(); }

void LoadDriver::Start(const std::string& target) {
  const int k = config_.channels > 0 ? std::min(config_.channels, node_count()) : node_count();
  for (int c = 0; c < k; ++c) {
    grpc::ChannelArguments args;
    // A connection of its own: without these, channels to one target share
    // one subchannel (one TCP connection) in gRPC's global pool.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("trainsup.load_channel", first_ + c);
    // The agent's own keepalive (agent/supervisor_link.cc).
    if (config_.keepalive) {
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    }
    args.SetMaxSendMessageSize(16 << 20);
    channels_.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
    stubs_.push_back(v1::AgentService::NewStub(channels_.back()));
  }
  ticker_ = std::thread([this] { Run(); });
}

v1::AgentService::Stub* LoadDriver::StubFor(int index) {
  return stubs_[static_cast<size_t>(index - first_) % stubs_.size()].get();
}

void LoadDriver::Go(int64_t origin_ns, int64_t fault_ns) {
  fault_ns_.store(fault_ns);
  origin_ns_.store(origin_ns);
}

void LoadDriver::Wake(int index) {
  std::lock_guard<std::mutex> lock(wake_mu_);
  woken_.push_back(index - first_);
}

void LoadDriver::Run() {
  using Turn = std::pair<int64_t, int>;  // (when, local index)
  std::priority_queue<Turn, std::vector<Turn>, std::greater<Turn>> turns;
  std::vector<int64_t> due(nodes_.size());
  const int64_t start = WallNowNs();
  // Streams open at config.connect_rate: a real cluster's agents do not all
  // connect in the same millisecond either.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    due[i] = start + static_cast<int64_t>(static_cast<double>(i) * kNsPerS / config_.connect_rate);
    turns.emplace(due[i], static_cast<int>(i));
  }
  std::vector<int> woken;
  while (!shutting_down_.load()) {
    int64_t now = WallNowNs();
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      woken.swap(woken_);
    }
    for (int i : woken) {
      due[static_cast<size_t>(i)] = now;
      turns.emplace(now, i);
    }
    woken.clear();
    int handled = 0;
    while (!turns.empty() && turns.top().first <= now) {
      const auto [when, i] = turns.top();
      turns.pop();
      if (when != due[static_cast<size_t>(i)]) continue;  // superseded by a wake
      const int64_t next = nodes_[static_cast<size_t>(i)]->Tick(now);
      due[static_cast<size_t>(i)] = next;
      if (next != kNever) turns.emplace(next, i);
      if (++handled % 64 == 0) now = WallNowNs();
    }
    const int64_t wait =
        turns.empty() ? 2'000'000 : std::clamp<int64_t>(turns.top().first - now, 0, 2'000'000);
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
  }
}

double LoadDriver::MeanIntervalSeconds() const {
  double sum = 0;
  for (const auto& node : nodes_) sum += node->interval_s();
  return nodes_.empty() ? 0 : sum / static_cast<double>(nodes_.size());
}

void LoadDriver::Shutdown() {
  if (shutting_down_.exchange(true)) return;
  if (ticker_.joinable()) ticker_.join();
  for (auto& node : nodes_) node->Cancel();
  // Every stream's OnDone must have run before the nodes go away.
  const int64_t deadline = WallNowNs() + 30 * kNsPerS;
  while (live_sessions_.load() > 0 && WallNowNs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace trainsup
