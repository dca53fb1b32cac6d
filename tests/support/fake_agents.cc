#include "tests/support/fake_agents.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_state.h"
#include "daemon/core/supervisor.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace testing {

SupervisorOptions FakeAgentsOptions() {
  SupervisorOptions o;
  o.step_window = 16;
  o.stall.floor = absl::Seconds(20);
  o.stall.factor = 10;
  o.stall.startup_grace = absl::Minutes(5);
  o.stall.checkpoint_grace = absl::Minutes(15);
  o.crash.settle = absl::Seconds(1);
  o.straggler.window = 10;
  o.straggler.ratio = 1.5;
  o.straggler.mad_factor = 3;
  o.straggler.persistence = 3;
  o.event_log_size = 1000;
  o.restart.limit = 5;
  o.restart.window = absl::Hours(1);
  o.restart.backoff_initial = absl::Seconds(5);
  o.restart.backoff_max = absl::Minutes(5);
  o.quarantine.after = 3;
  o.quarantine.window = absl::Hours(1);
  o.quarantine.max_fraction = 0.25;
  o.stop_timeout = absl::Seconds(60);
  o.stop_grace = absl::Seconds(10);
  o.start_timeout = absl::Minutes(5);
  return o;
}

std::vector<Event> OfKind(const std::vector<Event>& events, EventKind kind) {
  std::vector<Event> out;
  for (const Event& e : events) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

std::optional<double> Figure(const Event& e, const std::string& name) {
  for (const auto& [key, value] : e.figures) {
    if (key == name) return value;
  }
  return std::nullopt;
}

void FakeAgentsTest::Create() { sup_ = std::make_unique<Supervisor>(options_); }

AgentHelloInfo FakeAgentsTest::HelloOf(const std::string& node, std::optional<uint64_t> running) {
  const uint64_t incarnation = fixed_incarnation_ ? *fixed_incarnation_ : ++incarnation_;
  AgentHelloInfo hello = MakeHello(node, "job", incarnation, running.value_or(0));
  if (running) hello.launcher.state = LauncherState::kRunning;
  return hello;
}

SessionId FakeAgentsTest::Connect(absl::Time now, const AgentHelloInfo& hello,
                                  Supervisor::HelloResult* result_out) {
  absl::StatusOr<Supervisor::HelloResult> result = sup_->Hello(now, hello);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return 0;
  if (result_out != nullptr) *result_out = *result;
  last_word_.erase(result->superseded);
  last_word_[result->session] = {hello.generation, hello.launcher};
  return result->session;
}

SessionId FakeAgentsTest::Connect(absl::Time now, const std::string& node,
                                  std::optional<uint64_t> running,
                                  Supervisor::HelloResult* result_out) {
  return Connect(now, HelloOf(node, running), result_out);
}

void FakeAgentsTest::ConnectAgents(absl::Time now) {
  a_ = Connect(now, "node-a");
  b_ = Connect(now, "node-b");
  gen_ = job().generation();
}

std::vector<uint32_t> FakeAgentsTest::RanksOf(SessionId session) const {
  return session == a_ ? std::vector<uint32_t>{0, 1} : std::vector<uint32_t>{2, 3};
}

Heartbeat FakeAgentsTest::Hb(HeartbeatKind kind, uint32_t rank, int64_t step) const {
  return MakeHeartbeat(kind, rank, step, world_, gen_);
}

RankProcessInfo FakeAgentsTest::Alive(uint32_t rank) const {
  RankProcessInfo p = AliveProcess(rank);
  p.local_rank = rank % 2;
  p.generation = gen_;
  return p;
}

RankProcessInfo FakeAgentsTest::Died(uint32_t rank, double ago, int32_t exit_code,
                                     int32_t signal) const {
  RankProcessInfo p = DeadProcess(rank, ago, exit_code, signal);
  p.local_rank = rank % 2;
  p.generation = gen_;
  return p;
}

void FakeAgentsTest::SendWith(absl::Time now, SessionId session, const LauncherInfo& launcher,
                              std::vector<Heartbeat> heartbeats,
                              std::vector<RankProcessInfo> processes) {
  NodeReportInfo report;
  report.sequence = ++sequence_;
  report.generation = gen_;
  report.launcher = launcher;
  report.heartbeats = std::move(heartbeats);
  report.processes = std::move(processes);
  report.plans_held_through = PlansHeld(session);
  absl::Status status = sup_->Report(now, session, report);
  ASSERT_TRUE(status.ok()) << status;
  last_word_[session] = {report.generation, report.launcher};
}

uint64_t FakeAgentsTest::PlansHeld(SessionId session) const {
  if (deaf_to_plans_.count(session) > 0) return 0;
  const JobEntry* entry = sup_->FindEntry("job");
  if (entry == nullptr || entry->plans().plans().empty()) return 0;
  return entry->plans().plans().back().plan_id;
}

void FakeAgentsTest::Idle(absl::Time now) {
  for (const auto& [session, word] : last_word_) {
    NodeReportInfo report;
    report.sequence = ++sequence_;
    report.generation = word.generation;
    report.launcher = word.launcher;
    report.plans_held_through = PlansHeld(session);
    (void)sup_->Report(now, session, report);  // a superseded session is refused
  }
}

std::vector<Event> FakeAgentsTest::Sweep(absl::Time now) {
  Idle(now);
  return sup_->Sweep(now);
}

void FakeAgentsTest::Disconnect(absl::Time now, SessionId session) {
  last_word_.erase(session);
  sup_->Disconnected(now, session);
}

void FakeAgentsTest::Send(absl::Time now, SessionId session, std::vector<Heartbeat> heartbeats,
                          std::vector<RankProcessInfo> processes) {
  LauncherInfo running;
  running.state = LauncherState::kRunning;
  running.pid = 4000;
  SendWith(now, session, running, std::move(heartbeats), std::move(processes));
}

void FakeAgentsTest::SendLauncherExit(absl::Time now, SessionId session, int32_t exit_code,
                                      int32_t signal) {
  LauncherInfo exited;
  exited.state = LauncherState::kExited;
  exited.exit_code = exit_code;
  exited.signal = signal;
  SendWith(now, session, exited);
}

void FakeAgentsTest::SendStarted(absl::Time now, SessionId session) {
  std::vector<Heartbeat> hbs;
  std::vector<RankProcessInfo> processes;
  for (uint32_t r : RanksOf(session)) {
    hbs.push_back(Hb(HeartbeatKind::kStart, r, 0));
    processes.push_back(Alive(r));
  }
  Send(now, session, hbs, processes);
}

void FakeAgentsTest::SendStep(absl::Time now, SessionId session, int64_t step,
                              const std::function<void(Heartbeat&)>& fill) {
  std::vector<Heartbeat> hbs;
  std::vector<RankProcessInfo> processes;
  for (uint32_t r : RanksOf(session)) {
    Heartbeat& hb = hbs.emplace_back(Hb(HeartbeatKind::kStep, r, step));
    fill(hb);
    processes.push_back(Alive(r));
  }
  Send(now, session, hbs, processes);
}

const Job& FakeAgentsTest::job() const {
  const Job* j = sup_->FindJob("job");
  EXPECT_NE(j, nullptr);
  return *j;
}

const JobEntry& FakeAgentsTest::entry() const {
  const JobEntry* e = sup_->FindEntry("job");
  EXPECT_NE(e, nullptr);
  return *e;
}

std::string FakeAgentsTest::state() const {
  const JobEntry* e = sup_->FindEntry("job");
  EXPECT_NE(e, nullptr);
  return e == nullptr ? "no job" : std::string(JobStateName(e->lifecycle().state));
}

}  // namespace testing
}  // namespace trainsup
