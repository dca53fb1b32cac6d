#include "daemon/proto_convert.h"

#include <algorithm>
#include <cmath>

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
    case v1::HEARTBEAT_KIND_EXIT:
      return HeartbeatKind::kExit;
    case v1::HEARTBEAT_KIND_VERDICT:
      return HeartbeatKind::kVerdict;
    case v1::HEARTBEAT_KIND_KILL_CRITERIA:
      return HeartbeatKind::kKillCriteria;
    default:
      return HeartbeatKind::kUnspecified;
  }
}

VerdictAction VerdictFromProto(v1::VerdictAction action) {
  switch (action) {
    case v1::VERDICT_ACTION_DEFAULT:
      return VerdictAction::kDefault;
    case v1::VERDICT_ACTION_RESTART_ELSEWHERE:
      return VerdictAction::kRestartElsewhere;
    case v1::VERDICT_ACTION_TRANSIENT:
      return VerdictAction::kTransient;
    case v1::VERDICT_ACTION_STOP:
      return VerdictAction::kStop;
    default:  // UNSPECIFIED, and values from a newer helper
      return VerdictAction::kUnspecified;
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

RejectReason FromProto(v1::RejectReason in) {
  switch (in) {
    case v1::REJECT_REASON_INVALID_JSON:
      return RejectReason::kInvalidJson;
    case v1::REJECT_REASON_UNKNOWN_FIELD:
      return RejectReason::kUnknownField;
    case v1::REJECT_REASON_OVERSIZE:
      return RejectReason::kOversize;
    case v1::REJECT_REASON_WRONG_SENDER:
      return RejectReason::kWrongSender;
    case v1::REJECT_REASON_BAD_KIND:
      return RejectReason::kBadKind;
    case v1::REJECT_REASON_BAD_JOB:
      return RejectReason::kBadJob;
    case v1::REJECT_REASON_JOB_MISMATCH:
      return RejectReason::kJobMismatch;
    case v1::REJECT_REASON_BAD_WORLD_SIZE:
      return RejectReason::kBadWorldSize;
    case v1::REJECT_REASON_RANK_OUT_OF_RANGE:
      return RejectReason::kRankOutOfRange;
    case v1::REJECT_REASON_NEGATIVE_STEP:
      return RejectReason::kNegativeStep;
    case v1::REJECT_REASON_STEP_REGRESSED:
      return RejectReason::kStepRegressed;
    case v1::REJECT_REASON_BAD_DURATION:
      return RejectReason::kBadDuration;
    case v1::REJECT_REASON_STALE_GENERATION:
      return RejectReason::kStaleGeneration;
    case v1::REJECT_REASON_WORLD_SIZE_MISMATCH:
      return RejectReason::kWorldSizeMismatch;
    case v1::REJECT_REASON_TOO_LONG:
      return RejectReason::kTooLong;
    case v1::REJECT_REASON_UNKNOWN_GENERATION:
      return RejectReason::kUnknownGeneration;
    case v1::REJECT_REASON_BAD_VERDICT:
      return RejectReason::kBadVerdict;
    case v1::REJECT_REASON_BAD_SIGNAL:
      return RejectReason::kBadSignal;
    case v1::REJECT_REASON_OTHER:
    default:  // UNSPECIFIED, and values from a newer agent
      return RejectReason::kOther;
  }
}

Heartbeat FromProto(const v1::RankHeartbeat& in) {
  Heartbeat out;
  FromProto(in, &out);
  return out;
}

void FromProto(const v1::RankHeartbeat& in, Heartbeat* heartbeat) {
  Heartbeat& out = *heartbeat;
  out.kind = KindFromProto(in.kind());
  out.job = in.job();
  out.rank = in.rank();
  out.local_rank = in.local_rank();
  out.world_size = in.world_size();
  out.pid = in.pid();
  out.step = in.step();
  out.step_duration_s = in.step_duration_seconds();
  out.data_wait_s = in.data_wait_seconds();
  // Every field is assigned, absent ones reset: `out` may be a reused one.
  out.compute_s = in.has_compute_seconds() ? std::optional<double>(in.compute_seconds()) : std::nullopt;
  out.loss = in.has_loss() ? std::optional<double>(in.loss()) : std::nullopt;
  out.learning_rate =
      in.has_learning_rate() ? std::optional<double>(in.learning_rate()) : std::nullopt;
  out.grad_norm = in.has_grad_norm() ? std::optional<double>(in.grad_norm()) : std::nullopt;
  out.samples = in.has_samples() ? std::optional<uint64_t>(in.samples()) : std::nullopt;
  out.device_memory_bytes = in.has_device_memory_bytes()
                                ? std::optional<uint64_t>(in.device_memory_bytes())
                                : std::nullopt;
  out.checkpoint_blocking_s = in.checkpoint_blocking_seconds();
  out.checkpoint_async_s = in.checkpoint_async_seconds();
  out.exception_type = in.exception_type();
  out.exception_message = in.exception_message();
  out.generation = in.generation();
  out.restart_count = in.restart_count();
  out.exit_code = in.has_exit_code() ? std::optional<int32_t>(in.exit_code()) : std::nullopt;
  out.datagrams_dropped = in.datagrams_dropped();
  out.queued_s = in.queued_seconds();
  out.stack_signal = in.stack_signal();
  out.verdict = VerdictFromProto(in.verdict());
  out.verdict_reason = in.verdict_reason();
  out.host_rss_bytes =
      in.has_host_rss_bytes() ? std::optional<uint64_t>(in.host_rss_bytes()) : std::nullopt;
  out.tokens = in.has_tokens() ? std::optional<uint64_t>(in.tokens()) : std::nullopt;
  out.replica_digest =
      in.has_replica_digest() ? std::optional<uint64_t>(in.replica_digest()) : std::nullopt;
  out.replica_group = in.replica_group();
  out.device_memory_capacity_bytes =
      in.has_device_memory_capacity_bytes()
          ? std::optional<uint64_t>(in.device_memory_capacity_bytes())
          : std::nullopt;
  out.signal_settings.clear();  // keeps its capacity: `out` may be a reused one
  for (const auto& [name, value] : in.signal_settings()) {
    out.signal_settings.emplace_back(name, value);
  }
  out.kill_criteria.reset();
  if (in.has_kill_criteria()) out.kill_criteria = FromProto(in.kill_criteria());
}

KillCriteriaSpec FromProto(const v1::KillCriteria& in) {
  KillCriteriaSpec out;
  if (in.has_loss_above()) out.loss_above = in.loss_above();
  out.at_step = in.at_step();
  for (const v1::ReferencePoint& p : in.reference()) out.curve.push_back({p.step(), p.loss()});
  if (in.has_band()) out.band = in.band();
  out.band_absolute = in.band_absolute();
  if (in.has_spikes()) out.spikes = in.spikes();
  if (in.has_total_steps()) out.total_steps = in.total_steps();
  out.observe_only = in.observe_only();
  return out;
}

void ToProto(const KillCriteriaSpec& in, v1::KillCriteria* out) {
  if (in.loss_above) out->set_loss_above(*in.loss_above);
  out->set_at_step(in.at_step);
  for (const CurvePoint& p : in.curve) {
    v1::ReferencePoint* point = out->add_reference();
    point->set_step(p.step);
    point->set_loss(p.loss);
  }
  out->set_band(in.band);
  out->set_band_absolute(in.band_absolute);
  out->set_spikes(in.spikes);
  if (in.total_steps) out->set_total_steps(*in.total_steps);
  out->set_observe_only(in.observe_only);
}

LauncherInfo FromProto(const v1::LauncherStatus& in) {
  LauncherInfo out;
  out.state = StateFromProto(in.state());
  out.pid = in.pid();
  out.exit_code = in.exit_code();
  out.signal = in.signal();
  out.stderr_lines.assign(in.stderr_lines().begin(), in.stderr_lines().end());
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
  out.stderr_line = in.stderr_line();
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
  const double interval = in.report_interval_seconds();
  if (std::isfinite(interval) && interval > 0 && interval <= 3600) {
    out.report_interval = absl::Seconds(interval);
  }
  out.min_nodes = in.min_nodes();
  out.verdict_rules.assign(in.verdict_rules().begin(), in.verdict_rules().end());
  // An offer of no kind is none (an agent that leaves the rendezvous alone).
  if (in.has_rendezvous() && in.rendezvous().kind() != v1::RendezvousOffer::KIND_UNSPECIFIED) {
    const v1::RendezvousOffer& r = in.rendezvous();
    RendezvousOffer offer;
    offer.kind = r.kind() == v1::RendezvousOffer::KIND_STATIC ? RendezvousKind::kStatic
                                                              : RendezvousKind::kC10d;
    offer.address = r.address();
    offer.port = r.port();
    offer.node_rank = r.node_rank();
    out.rendezvous = std::move(offer);
  }
  if (in.has_preflight()) {
    const v1::PreflightResult& p = in.preflight();
    const double seconds = p.seconds();
    out.preflight = PreflightInfo{p.passed(), p.exit_code(), p.timed_out(),
                                  std::isfinite(seconds) && seconds > 0 ? seconds : 0, p.output()};
  }
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
  FromProto(in, &out);
  return out;
}

void FromProto(const v1::NodeReport& in, NodeReportInfo* report) {
  NodeReportInfo& out = *report;
  out.sequence = in.sequence();
  out.generation = in.generation();
  out.launcher = FromProto(in.launcher());
  // Resized, not rebuilt: the heartbeats (and their strings) of the previous
  // report are overwritten in place, so a stream's steady reports allocate
  // nothing per heartbeat.
  out.heartbeats.resize(in.heartbeats_size());
  for (int i = 0; i < in.heartbeats_size(); ++i) FromProto(in.heartbeats(i), &out.heartbeats[i]);
  out.processes.clear();
  for (const v1::RankProcess& p : in.processes()) out.processes.push_back(FromProto(p));
  out.rejected.clear();
  // Counts of values that map to the same core reason (kOther) add up: each
  // is cumulative, and so is their sum.
  for (const v1::RejectCount& r : in.rejected()) {
    const RejectReason reason = FromProto(r.reject_reason());
    auto same = std::find_if(out.rejected.begin(), out.rejected.end(),
                             [reason](const auto& entry) { return entry.first == reason; });
    if (same == out.rejected.end()) {
      out.rejected.emplace_back(reason, r.count());
    } else {
      same->second += r.count();
    }
  }
  out.dropped_total = in.dropped_total();
  out.plans_held_through = in.plans_held_through();
}

namespace {

CollectiveState FromProto(v1::CollectiveOp::State state) {
  switch (state) {
    case v1::CollectiveOp::STATE_SCHEDULED:
      return CollectiveState::kScheduled;
    case v1::CollectiveOp::STATE_STARTED:
      return CollectiveState::kStarted;
    case v1::CollectiveOp::STATE_COMPLETED:
      return CollectiveState::kCompleted;
    default:
      return CollectiveState::kUnknown;
  }
}

CollectiveProgress FromProto(const v1::CollectiveProgress& in) {
  return {in.last_enqueued(), in.last_started(), in.last_completed()};
}

std::vector<CollectiveOp> FromProto(
    const google::protobuf::RepeatedPtrField<v1::CollectiveOp>& in) {
  std::vector<CollectiveOp> out;
  out.reserve(in.size());
  for (const v1::CollectiveOp& o : in) {
    CollectiveOp op;
    op.seq = o.seq();
    op.p2p = o.p2p();
    op.op = o.op();
    op.peer = o.peer();
    op.state = FromProto(o.state());
    op.retired = o.retired();
    out.push_back(std::move(op));
  }
  return out;
}

FlightRecord FromProto(const v1::FlightRecordSummary& in) {
  FlightRecord out;
  out.version = in.version();
  out.entries = in.entries();
  out.groups.reserve(in.groups_size());
  for (const v1::CollectiveGroup& g : in.groups()) {
    GroupRecord group;
    group.pg_id = g.pg_id();
    group.name = g.name();
    group.desc = g.desc();
    group.ranks.assign(g.ranks().begin(), g.ranks().end());
    group.collectives = FromProto(g.collectives());
    group.p2p = FromProto(g.p2p());
    group.from_pg_status = g.from_pg_status();
    group.last_collectives = FromProto(g.last_collectives());
    group.last_p2p = FromProto(g.last_p2p());
    out.groups.push_back(std::move(group));
  }
  return out;
}

}  // namespace

StacksInfo FromProto(const v1::StacksReport& in) {
  StacksInfo out;
  out.generation = in.generation();
  const double seconds = in.collect_seconds();
  out.collect_seconds = std::isfinite(seconds) && seconds > 0 ? seconds : 0;
  out.stacks.reserve(in.stacks_size());
  for (const v1::RankStack& s : in.stacks()) {
    RankStackInfo stack{s.rank(),   s.local_rank(), s.pid(), s.answered(),
                        s.text(),   std::nullopt,   s.flight_record_error()};
    if (s.has_flight_record()) stack.flight_record = FromProto(s.flight_record());
    out.stacks.push_back(std::move(stack));
  }
  return out;
}

GpuErrorInfo FromProto(const v1::GpuError& in) {
  GpuErrorInfo out;
  out.generation = in.generation();
  out.xid = in.xid();
  out.pci_bus_id = in.pci_bus_id();
  out.gpu_index = in.gpu_index();
  out.gpu_uuid = in.gpu_uuid();
  out.local_ranks.assign(in.local_ranks().begin(), in.local_ranks().end());
  out.ranks.assign(in.ranks().begin(), in.ranks().end());
  out.pid = in.pid();
  out.process = in.process();
  out.message = in.message();
  return out;
}

GpuHealthInfo FromProto(const v1::GpuHealthReport& in) {
  // Absent stays absent: a counter no source reported is not a zero.
  auto optional = [](bool has, auto value) {
    return has ? std::optional<decltype(value)>(value) : std::nullopt;
  };
  GpuHealthInfo out;
  out.generation = in.generation();
  out.source = in.source();
  out.gpus.reserve(std::min<size_t>(in.gpus_size(), kMaxGpusPerNode + 1));
  for (const v1::GpuHealthSample& g : in.gpus()) {
    if (out.gpus.size() > kMaxGpusPerNode) break;  // one past the bound: refused whole
    GpuHealthSampleInfo s;
    s.index = g.index();
    s.uuid = g.uuid();
    s.pci_bus_id = g.pci_bus_id();
    s.clock_event_reasons = optional(g.has_clock_event_reasons(), g.clock_event_reasons());
    s.temperature_c = optional(g.has_temperature_c(), g.temperature_c());
    s.pcie_replays = optional(g.has_pcie_replays(), g.pcie_replays());
    s.ecc_uncorrectable = optional(g.has_ecc_uncorrectable(), g.ecc_uncorrectable());
    s.uncorrectable_remapped_rows =
        optional(g.has_uncorrectable_remapped_rows(), g.uncorrectable_remapped_rows());
    s.row_remap_failure = optional(g.has_row_remap_failure(), g.row_remap_failure());
    s.row_remap_pending = optional(g.has_row_remap_pending(), g.row_remap_pending());
    s.last_xid = optional(g.has_last_xid(), g.last_xid());
    s.local_ranks.assign(g.local_ranks().begin(), g.local_ranks().end());
    s.ranks.assign(g.ranks().begin(), g.ranks().end());
    out.gpus.push_back(std::move(s));
  }
  return out;
}

v1::Rendezvous ToProto(const RendezvousSpec& spec) {
  v1::Rendezvous out;
  out.set_host_node(spec.host_node);
  out.set_address(spec.address);
  out.set_port(spec.port);
  out.set_node_rank(spec.node_rank);
  return out;
}

v1::ResumeAdvice ToProto(const ResumeAdvice& advice) {
  v1::ResumeAdvice out;
  if (advice.limit) out.set_limit(*advice.limit);
  if (advice.skip_first && advice.skip_last) {
    out.set_skip_first(*advice.skip_first);
    out.set_skip_last(*advice.skip_last);
  }
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
      stop->set_collect_stacks(command.collect_stacks);
      break;
    }
    case AgentCommand::Kind::kStart:
      out.mutable_start()->set_generation(command.generation);
      out.mutable_start()->set_reason(command.reason);
      if (command.rendezvous) *out.mutable_start()->mutable_rendezvous() = ToProto(*command.rendezvous);
      if (!command.resume.empty()) *out.mutable_start()->mutable_resume() = ToProto(command.resume);
      break;
    case AgentCommand::Kind::kHold:
      out.mutable_hold()->set_reason(command.reason);
      break;
    case AgentCommand::Kind::kQuarantine:
      out.mutable_quarantined()->set_reason(command.reason);
      break;
    case AgentCommand::Kind::kPlan:
      ToProto(command.plan, out.mutable_plan());
      break;
    case AgentCommand::Kind::kSettings:
      out.mutable_settings()->set_report_interval_seconds(
          absl::ToDoubleSeconds(command.report_interval));
      break;
  }
  return out;
}

void ToProto(const CheckpointPlanSpec& plan, v1::CheckpointPlan* out) {
  out->Clear();
  out->set_plan_id(plan.plan_id);
  out->set_anchor_step(plan.anchor_step);
  out->set_interval_steps(plan.interval_steps);
  out->set_effective_from_step(plan.effective_from_step);
  for (int64_t step : plan.one_off_steps) out->add_one_off_steps(step);
}

}  // namespace trainsup
