#ifndef TRAINSUP_TESTS_SUPPORT_CORE_BUILDERS_H_
#define TRAINSUP_TESTS_SUPPORT_CORE_BUILDERS_H_

// Builders of the core's input types (daemon/core/heartbeat.h) with the
// conventions the unit tests share: job "job", two ranks a node (local rank
// rank % 2), world size 4, and rank r's process pid 100 + r. Each sets only
// the fields named; a test sets any other field (or overrides one) on the
// value it gets back, so that what it feeds the code stays visible in it.

#include <cstdint>
#include <string>

#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/heartbeat.h"

namespace trainsup {
namespace testing {

inline constexpr uint32_t kTestWorldSize = 4;

// A heartbeat of `kind` from `rank` at `step`: job "job", local rank
// rank % 2, pid 100 + rank.
inline Heartbeat MakeHeartbeat(HeartbeatKind kind, uint32_t rank, int64_t step,
                               uint32_t world_size = kTestWorldSize, uint64_t generation = 0) {
  Heartbeat hb;
  hb.kind = kind;
  hb.job = "job";
  hb.rank = rank;
  hb.local_rank = rank % 2;
  hb.world_size = world_size;
  hb.pid = 100 + rank;
  hb.step = step;
  hb.generation = generation;
  return hb;
}

// Plan `id`: a checkpoint every `interval` steps from step `from` (its
// anchor), no one-off.
inline CheckpointPlanSpec PeriodicPlan(uint64_t id, int64_t interval, int64_t from) {
  CheckpointPlanSpec plan;
  plan.plan_id = id;
  plan.anchor_step = from;
  plan.interval_steps = interval;
  plan.effective_from_step = from;
  return plan;
}

// `rank`'s process, alive, as its agent reports it: pid 100 + rank (local
// rank and generation left 0).
inline RankProcessInfo AliveProcess(uint32_t rank) {
  RankProcessInfo p;
  p.rank = rank;
  p.pid = 100 + rank;
  p.alive = true;
  return p;
}

// `rank`'s process, dead `ago` seconds before the report, with a known exit
// code and signal.
inline RankProcessInfo DeadProcess(uint32_t rank, double ago, int32_t exit_code,
                                   int32_t signal = 0) {
  RankProcessInfo p = AliveProcess(rank);
  p.alive = false;
  p.exit_known = true;
  p.exit_code = exit_code;
  p.signal = signal;
  p.died_seconds_ago = ago;
  return p;
}

// A hello of a fresh agent on `node`: its launcher waiting, agent version
// "test".
inline AgentHelloInfo MakeHello(const std::string& node, const std::string& job = "job",
                                uint64_t incarnation = 1, uint64_t generation = 0) {
  AgentHelloInfo hello;
  hello.node = node;
  hello.job = job;
  hello.incarnation = incarnation;
  hello.generation = generation;
  hello.launcher.state = LauncherState::kWaiting;
  hello.agent_version = "test";
  return hello;
}

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_CORE_BUILDERS_H_
