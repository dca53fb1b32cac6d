#include "daemon/proto_convert.h"

namespace trainsup {
namespace {

HeartbeatKind KindFromProto(v1::HeartbeatKind kind) {
  switch (kind) {
    case v1::HEARTBEAT_KIND_STEP:
      return HeartbeatKind::kStep;
    case v1::HEARTBEAT_KIND_COMPUTE_BEGIN:
      return HeartbeatKind::kComputeBegin;
    case v1::HEARTBEAT_KIND_COMPUTE_END:
      return HeartbeatKind::kComputeEnd;
    case v1::HEARTBEAT_KIND_CHECKPOINT_BEGIN:
      return HeartbeatKind::kCheckpointBegin;
    case v1::HEARTBEAT_KIND_CHECKPOINT_END:
      return HeartbeatKind::kCheckpointEnd;
    case v1::HEARTBEAT_KIND_EXCEPTION:
      return HeartbeatKind::kException;
    case v1::HEARTBEAT_KIND_START:
      return HeartbeatKind::kStart;
    default:
      return HeartbeatKind::kUnspecified;
  }
}

LauncherState StateFromProto(v1::LauncherStatus::State state) {
  switch (state) {
    case v1::LauncherStatus::STATE_WAITING:
      return LauncherState::kWaiting;
    case v1::LauncherStatus::STATE_RUNNING:
      return LauncherState::kRunning;
    case v1::LauncherStatus::STATE_STOPPING:
      return LauncherState::kStopping;
    case v1::LauncherStatus::STATE_EXITED:
      return LauncherState::kExited;
    default:
      return LauncherState::kUnspecified;
  }
}

}  // namespace

Heartbeat FromProto(const v1::RankHeartbeat& in) {
  Heartbeat out;
  out.kind = KindFromProto(in.kind());
  out.job = in.job();
  out.rank = in.rank();
  out.local_rank = in.local_rank();
  out.world_size = in.world_size();
  out.pid = in.pid();
  out.step = in.step();
  out.step_duration_s = in.step_duration_seconds();
  out.data_wait_s = in.data_wait_seconds();
  if (in.has_compute_seconds()) out.compute_s = in.compute_seconds();
  if (in.has_loss()) out.loss = in.loss();
  if (in.has_learning_rate()) out.learning_rate = in.learning_rate();
  if (in.has_grad_norm()) out.grad_norm = in.grad_norm();
  if (in.has_samples()) out.samples = in.samples();
  if (in.has_device_memory_bytes()) out.device_memory_bytes = in.device_memory_bytes();
  out.checkpoint_blocking_s = in.checkpoint_blocking_seconds();
  out.checkpoint_async_s = in.checkpoint_async_seconds();
  out.exception_type = in.exception_type();
  out.exception_message = in.exception_message();
  out.generation = in.generation();
  out.restart_count = in.restart_count();
  return out;
}

LauncherInfo FromProto(const v1::LauncherStatus& in) {
  LauncherInfo out;
  out.state = StateFromProto(in.state());
  out.pid = in.pid();
  out.exit_code = in.exit_code();
  out.signal = in.signal();
  return out;
}

RankProcessInfo FromProto(const v1::RankProcess& in) {
  RankProcessInfo out;
  out.rank = in.rank();
  out.local_rank = in.local_rank();
  out.pid = in.pid();
  out.generation = in.generation();
  out.alive = in.alive();
  out.exit_known = in.exit_known();
  out.exit_code = in.exit_code();
  out.signal = in.signal();
  out.died_seconds_ago = in.died_seconds_ago();
  out.exception_seen = in.exception_seen();
  out.exception_seconds_ago = in.exception_seconds_ago();
  return out;
}

AgentHelloInfo FromProto(const v1::AgentHello& in) {
  AgentHelloInfo out;
  out.node = in.node();
  out.job = in.job();
  out.incarnation = in.incarnation();
  out.generation = in.generation();
  out.launcher = FromProto(in.launcher());
  out.agent_version = in.agent_version();
  for (const v1::CheckpointPlan& p : in.plans()) {
    CheckpointPlanSpec spec;
    spec.plan_id = p.plan_id();
    spec.anchor_step = p.anchor_step();
    spec.interval_steps = p.interval_steps();
    spec.effective_from_step = p.effective_from_step();
    spec.one_off_steps.assign(p.one_off_steps().begin(), p.one_off_steps().end());
    out.plans.push_back(std::move(spec));
  }
  return out;
}

NodeReportInfo FromProto(const v1::NodeReport& in) {
  NodeReportInfo out;
  out.sequence = in.sequence();
  out.generation = in.generation();
  out.launcher = FromProto(in.launcher());
  out.heartbeats.reserve(in.heartbeats_size());
  for (const v1::RankHeartbeat& hb : in.heartbeats()) out.heartbeats.push_back(FromProto(hb));
  out.processes.reserve(in.processes_size());
  for (const v1::RankProcess& p : in.processes()) out.processes.push_back(FromProto(p));
  for (const v1::RejectCount& r : in.rejected()) out.rejected.emplace_back(r.reason(), r.count());
  out.dropped_total = in.dropped_total();
  return out;
}

v1::SupervisorMessage ToProto(const AgentCommand& command) {
  v1::SupervisorMessage out;
  switch (command.kind) {
    case AgentCommand::Kind::kStop: {
      v1::StopCommand* stop = out.mutable_stop();
      stop->set_generation(command.generation);
      stop->set_reason(command.reason);
      stop->set_grace_seconds(absl::ToDoubleSeconds(command.grace));
      break;
    }
    case AgentCommand::Kind::kStart:
      out.mutable_start()->set_generation(command.generation);
      out.mutable_start()->set_reason(command.reason);
      break;
    case AgentCommand::Kind::kHold:
      out.mutable_hold()->set_reason(command.reason);
      break;
    case AgentCommand::Kind::kQuarantine:
      out.mutable_quarantined()->set_reason(command.reason);
      break;
    case AgentCommand::Kind::kPlan: {
      v1::CheckpointPlan* plan = out.mutable_plan();
      plan->set_plan_id(command.plan.plan_id);
      plan->set_anchor_step(command.plan.anchor_step);
      plan->set_interval_steps(command.plan.interval_steps);
      plan->set_effective_from_step(command.plan.effective_from_step);
      for (int64_t step : command.plan.one_off_steps) plan->add_one_off_steps(step);
      break;
    }
  }
  return out;
}

}  // namespace trainsup
