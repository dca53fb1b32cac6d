#ifndef TRAINSUP_TESTS_SUPPORT_FAKE_AGENTS_H_
#define TRAINSUP_TESTS_SUPPORT_FAKE_AGENTS_H_

// Fake agents for the unit tests that drive a Supervisor through
// Hello/Report/Sweep as the agents' adapter does (supervisor_sweep_test,
// supervisor_lifecycle_test, supervisor_planning_test): FakeAgentsTest, a
// fixture base whose two agents of job "job", node-a (ranks 0, 1) and node-b
// (ranks 2, 3), report heartbeats and processes built as in
// tests/support/core_builders.h; the options those tests share; and OfKind
// and Figure, to read the events the supervisor emits.

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/supervisor.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace testing {

// The supervisor options of these tests, spelled out rather than taken from
// the defaults: small windows, a 20s stall floor, 1s crash settle, a cap of
// 5 restarts an hour from a 5s backoff, quarantine after 3 failures.
SupervisorOptions FakeAgentsOptions();

// The events of `kind` among `events`, in order.
std::vector<Event> OfKind(const std::vector<Event>& events, EventKind kind);

// The figure `name` of `e`; nullopt if it has none.
std::optional<double> Figure(const Event& e, const std::string& name);

// The supervisor (`sup_`, made from `options_` by Create) and the agents'
// side of the conversation: sessions, the generation they run, report
// sequence numbers. A derived fixture connects the agents and drives steps
// its own way.
class FakeAgentsTest : public ::testing::Test {
 protected:
  // Makes `sup_` from `options_`.
  void Create();

  // The hello of the agent on `node` for job "job": a fresh agent (launcher
  // waiting) unless `running` names the generation it already runs. Its
  // incarnation is `fixed_incarnation_` if set, else a new one (1, 2, ...).
  AgentHelloInfo HelloOf(const std::string& node, std::optional<uint64_t> running = std::nullopt);

  // Says `hello` at `now`; returns the session (0, failing the test, on
  // error) and, if `result_out` is given, the whole result.
  SessionId Connect(absl::Time now, const AgentHelloInfo& hello,
                    Supervisor::HelloResult* result_out = nullptr);
  SessionId Connect(absl::Time now, const std::string& node,
                    std::optional<uint64_t> running = std::nullopt,
                    Supervisor::HelloResult* result_out = nullptr);

  // Fresh agents on node-a and node-b say hello at `now`; `gen_` becomes
  // the job's generation.
  void ConnectAgents(absl::Time now);

  // The ranks of node-a's session (0, 1); of any other, node-b's (2, 3).
  std::vector<uint32_t> RanksOf(SessionId session) const;

  // A heartbeat of the current generation `gen_` in a world of `world_`.
  Heartbeat Hb(HeartbeatKind kind, uint32_t rank, int64_t step) const;
  // `rank`'s process in generation `gen_`, alive; or dead `ago` seconds
  // before the report with `exit_code` (or killed by `signal`).
  RankProcessInfo Alive(uint32_t rank) const;
  RankProcessInfo Died(uint32_t rank, double ago, int32_t exit_code, int32_t signal = 0) const;

  // A report of generation `gen_` (the next sequence number) with
  // `launcher`, `heartbeats` and `processes`; fails the test if refused.
  void SendWith(absl::Time now, SessionId session, const LauncherInfo& launcher,
                std::vector<Heartbeat> heartbeats = {},
                std::vector<RankProcessInfo> processes = {});
  // The same with the agent's command running (pid 4000).
  void Send(absl::Time now, SessionId session, std::vector<Heartbeat> heartbeats = {},
            std::vector<RankProcessInfo> processes = {});
  // The agent's command ended with `exit_code` / `signal`.
  void SendLauncherExit(absl::Time now, SessionId session, int32_t exit_code, int32_t signal = 0);
  // The agent launched the current generation: its ranks say START, alive.
  void SendStarted(absl::Time now, SessionId session);
  // Every rank of `session` completes `step` at `now`, alive: a STEP that
  // `fill` completes (loss, durations, ...).
  void SendStep(absl::Time now, SessionId session, int64_t step,
                const std::function<void(Heartbeat&)>& fill);

  // Every live session repeats its last report (the same launcher and
  // generation, no heartbeats), as agents do every report interval idle or
  // not; then the supervisor sweeps. Returns the sweep's events.
  std::vector<Event> Sweep(absl::Time now);
  // Only the repeated reports.
  void Idle(absl::Time now);
  // The session's stream ends.
  void Disconnect(absl::Time now, SessionId session);
  // The plans an agent says it holds: every plan published, unless its
  // session is in `deaf_to_plans_` (then none).
  uint64_t PlansHeld(SessionId session) const;

  const Job& job() const;
  // Everything the supervisor holds about job "job": verdicts, lifecycle.
  const JobEntry& entry() const;
  // The job's lifecycle state by name ("running", ...), readable in failures.
  std::string state() const;

  SupervisorOptions options_;
  std::unique_ptr<Supervisor> sup_;
  SessionId a_ = 0;  // node-a
  SessionId b_ = 0;  // node-b
  uint64_t gen_ = 0;
  uint32_t world_ = kTestWorldSize;
  uint64_t sequence_ = 0;                      // the last report's
  uint64_t incarnation_ = 0;                   // the last new incarnation given
  std::optional<uint64_t> fixed_incarnation_;  // set: agents that never restart
  // What each live session last told the supervisor.
  struct LastWord {
    uint64_t generation = 0;
    LauncherInfo launcher;
  };
  std::map<SessionId, LastWord> last_word_;
  std::set<SessionId> deaf_to_plans_;
};

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_FAKE_AGENTS_H_
