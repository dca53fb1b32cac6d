#ifndef TRAINSUP_TESTS_SUPPORT_CORE_PARTS_H_
#define TRAINSUP_TESTS_SUPPORT_CORE_PARTS_H_

// The core's actors wired as the Supervisor wires them (daemon/core/
// supervisor.cc), without the Supervisor: the fixture of the tests of one
// actor class (detection_test, failure_handler_test, restart_coordinator_test,
// job_planner_test, reconciler_test). A test calls the actor under test
// itself and reads what it decided (events, commands, fences, journal) from
// `decisions_`. Time is `clock_`, a FakeClock at TestEpoch() that moves only
// when told; OfKind and Figure (fake_agents.h) read the events. Job "job"
// runs on node-a (ranks 0, 1) and node-b (ranks 2, 3), as in
// tests/support/core_builders.h.

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/detection.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_planner.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/reconciler.h"
#include "daemon/core/restart_coordinator.h"
#include "daemon/core/supervisor_options.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/fake_agents.h"  // OfKind, Figure
#include "tests/support/test_time.h"

namespace trainsup {
namespace testing {

// The options of these tests, spelled out rather than taken from the
// defaults: a 20s stall floor, 1s crash settle, a node lost after 15s, at
// most 5 restarts an hour from a 5s backoff, a 30s stop timeout, quarantine
// after 3 failures with no fraction cap in the way.
inline SupervisorOptions CorePartsOptions() {
  SupervisorOptions o;
  o.stall.floor = absl::Seconds(20);
  o.stall.factor = 10;
  o.crash.settle = absl::Seconds(1);
  o.node_loss.lost_after = absl::Seconds(15);
  o.restart.limit = 5;
  o.restart.window = absl::Hours(1);
  o.restart.backoff_initial = absl::Seconds(5);
  o.stop_timeout = absl::Seconds(30);
  o.quarantine.after = 3;
  o.quarantine.window = absl::Hours(1);
  o.quarantine.max_fraction = 1.0;
  return o;
}

class CorePartsTest : public ::testing::Test {
 protected:
  explicit CorePartsTest(SupervisorOptions options = CorePartsOptions())
      : options_(std::move(options)) {}

  absl::Time now() const { return clock_.Now(); }

  // Job "job" at generation 1, pending: the agents of node-a and node-b
  // connected now, running generation 1 and members of it; each rank said
  // START and its process is alive.
  void StartJob() {
    JobEntry& entry = jobs_.FindOrAdd("job");
    entry.job().ObserveGeneration(now(), 1);
    entry.SyncGeneration();
    entry.NoteHeard(now());
    for (const char* name : {"node-a", "node-b"}) {
      const NodeIndex index = agents_.Connect(now(), MakeHello(name)).node;
      NodeRecord& n = agents_.mutable_node(index);
      n.generation = 1;
      n.member_generation = 1;
      n.told.start_generation = 1;
      n.launcher.state = LauncherState::kRunning;
      n.launcher.pid = 4000;
      entry.NoteLauncher(name, 1, n.launcher);  // as its agent's report does
    }
    for (uint32_t rank = 0; rank < kTestWorldSize; ++rank) {
      Beat(MakeHeartbeat(HeartbeatKind::kStart, rank, -1, kTestWorldSize, 1));
      RankProcessInfo alive = AliveProcess(rank);
      alive.generation = 1;
      job().job().ApplyProcess(now(), NodeOfRank(rank), alive);
    }
  }
  // StartJob, then the job moves to running (its ranks reported). What that
  // decided is taken: a test reads only what follows.
  void RunJob() {
    StartJob();
    ASSERT_TRUE(restarts_.Transition(now(), job(), JobState::kRunning, "ranks report").ok());
    decisions_.Take();
  }

  JobEntry& job() { return *jobs_.Find("job"); }
  NodeIndex Index(const std::string& name) const { return agents_.Find(name); }
  NodeRecord& Node(const std::string& name) { return agents_.mutable_node(Index(name)); }
  // node-a for ranks 0 and 1, node-b for 2 and 3.
  NodeIndex NodeOfRank(uint32_t rank) const { return Index(rank < 2 ? "node-a" : "node-b"); }

  // `hb` from its rank's node, received now; fails the test if refused.
  void Beat(const Heartbeat& hb) {
    EXPECT_EQ(job().job().Apply(now(), NodeOfRank(hb.rank), hb), std::nullopt);
  }
  // Every rank in `ranks` finished `step` (each step 1s long), now.
  void Step(int64_t step, std::initializer_list<uint32_t> ranks = {0, 1, 2, 3}) {
    for (uint32_t rank : ranks) {
      Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, rank, step, kTestWorldSize,
                                   job().job().generation());
      hb.step_duration_s = 1.0;
      Beat(hb);
    }
  }
  // `name`'s agent is heard now (a report with no news).
  void Heard(const std::string& name) { Node(name).last_report = now(); }
  // Every rank steps 1..`steps`, one step a second, both agents heard.
  void RunSteps(int64_t steps) {
    for (int64_t s = 1; s <= steps; ++s) {
      clock_.Advance(absl::Seconds(1));
      Step(s);
      Heard("node-a");
      Heard("node-b");
    }
  }

  FakeClock clock_{TestEpoch()};
  const SupervisorOptions options_;
  Decisions decisions_{options_.event_log_size};
  AgentRegistry agents_;
  QuarantinePolicy quarantine_{options_.quarantine};
  JobTable jobs_{options_};
  RestartCoordinator restarts_{options_, agents_, quarantine_, decisions_};
  FailureHandler failures_{options_, agents_, quarantine_, jobs_, restarts_, decisions_};
  Detection detection_{options_, agents_, decisions_, failures_};
  JobPlanner planner_{options_, agents_, quarantine_, decisions_};
  Reconciler reconciler_{options_.stop_grace, agents_, quarantine_, decisions_};
};

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_CORE_PARTS_H_
