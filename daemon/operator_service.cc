#include "daemon/operator_service.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/format.h"
#include "daemon/core/job_view.h"

namespace trainsup {
namespace {

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
}

double SecondsSince(absl::Time then, absl::Time now) {
  if (then == absl::InfinitePast()) return -1;
  return absl::ToDoubleSeconds(now - then);
}

void RenderJob(const JobView& view, v1::Job* out) {
  const JobEntry& entry = *view.entry;
  const Job& job = entry.job();
  out->set_job_id(job.id());
  out->set_generation(job.generation());
  out->set_world_size(job.world_size());
  out->set_ranks_reporting(job.ranks_reporting());
  out->set_ranks_alive(job.ranks_alive());
  out->set_step(job.max_step());
  if (job.last_progress() != absl::InfinitePast()) {
    SetTimestamp(job.last_progress(), out->mutable_last_progress_time());
  }
  out->set_heartbeats_received(job.heartbeats_received());
  out->set_nodes(view.nodes);
  out->set_step_p50_seconds(view.step_stats.median_rank_p50_s);
  out->set_step_p99_seconds(view.step_stats.median_rank_p99_s);
  out->set_stalled(entry.verdicts().stalled);
  out->set_stragglers(job.stragglers());
  const JobLifecycle& life = entry.lifecycle;
  out->set_state(std::string(JobStateName(life.state)));
  out->set_state_reason(life.reason);
  if (life.since != absl::InfinitePast()) SetTimestamp(life.since, out->mutable_state_since());
  out->set_restarts(life.restarts);
}

std::string ExitText(const RankState& r) {
  if (!r.death) return "";
  return ExitStatusText(r.death->exit_known, r.death->exit_code, r.death->signal);
}

void RenderEvent(const Event& e, v1::Event* out) {
  out->set_id(e.id);
  SetTimestamp(e.time, out->mutable_time());
  out->set_kind(std::string(EventKindName(e.kind)));
  out->set_job_id(e.job);
  out->set_generation(e.generation);
  if (e.rank) out->set_rank(*e.rank);
  out->set_node(e.node);
  out->set_message(e.message);
  for (const auto& [name, value] : e.figures) (*out->mutable_figures())[name] = value;
}

}  // namespace

grpc::Status OperatorServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                           v1::ListJobsResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListJobs"); !s.ok()) return s;
  host_->Read([&](const Supervisor& core, absl::Time now) {
    for (const JobEntry* job : core.Jobs()) RenderJob(core.ViewOf(*job, now), response->add_jobs());
    return 0;
  });
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::ListRanks(grpc::ServerContext* context, const v1::ListRanksRequest* request,
                                            v1::ListRanksResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListRanks"); !s.ok()) return s;
  return host_->Read([&](const Supervisor& core, absl::Time now) {
    const JobEntry* entry = core.FindEntry(request->job_id());
    if (entry == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no job '", request->job_id(), "'"));
    }
    const Job* job = &entry->job();
    const GenerationVerdicts& verdicts = entry->verdicts();
    response->set_job_id(job->id());
    response->set_world_size(job->world_size());
    for (const auto& [i, r] : job->ranks()) {
      if (!r.seen) continue;
      v1::Rank* out = response->add_ranks();
      out->set_rank(i);
      if (r.node != kNoNode) out->set_node(core.node(r.node).name);
      out->set_local_rank(r.local_rank);
      out->set_pid(r.pid);
      out->set_generation(job->generation());
      out->set_step(r.step);
      StepWindow::Quantiles q = r.step_durations.P50P99();
      out->set_step_p50_seconds(q.p50);
      out->set_step_p99_seconds(q.p99);
      out->set_last_heartbeat_age_seconds(SecondsSince(r.last_heartbeat, now));
      out->set_alive(r.alive());
      if (r.loss) out->set_loss(*r.loss);
      if (r.learning_rate) out->set_learning_rate(*r.learning_rate);
      out->set_heartbeats(r.heartbeats);
      StepWindow::Quantiles c = r.compute_durations.P50P99();
      out->set_compute_p50_seconds(c.p50);
      out->set_compute_p99_seconds(c.p99);
      out->set_phase(std::string(StepPhaseName(r.phase)));
      out->set_straggler(r.straggler);
      out->set_stall_culprit(verdicts.stalled && verdicts.stall_culprit == i);
      out->set_crash_culprit(verdicts.crash_culprit == i);
      out->set_liveness(std::string(LivenessName(r.liveness)));
      out->set_datagrams_dropped(r.datagrams_dropped);
      out->set_exit(ExitText(r));
      if (!r.exception_type.empty()) {
        out->set_exception(absl::StrCat(r.exception_type, ": ", r.exception_message));
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status OperatorServiceImpl::ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest*,
                                            v1::ListNodesResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListNodes"); !s.ok()) return s;
  host_->Read([&](const Supervisor& core, absl::Time now) {
    for (const NodeView& view : core.NodeViews()) {
      const NodeRecord& node = *view.record;
      v1::Node* out = response->add_nodes();
      out->set_node(node.name);
      out->set_job_id(node.job);
      out->set_connected(node.connected);
      out->set_agent_incarnation(node.incarnation);
      out->set_last_report_age_seconds(SecondsSince(node.last_report, now));
      out->set_ranks(view.ranks);
      out->set_launcher_state(std::string(LauncherStateName(node.launcher.state)));
      out->set_heartbeats_received(node.heartbeats_received);
      out->set_quarantined(view.quarantined);
      out->set_quarantine_reason(view.quarantine_reason);
      out->set_generation(node.generation);
      out->set_unreachable(node.unreachable);
    }
    std::sort(response->mutable_nodes()->begin(), response->mutable_nodes()->end(),
              [](const v1::Node& a, const v1::Node& b) { return a.node() < b.node(); });
    return 0;
  });
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::ListEvents(grpc::ServerContext* context,
                                             const v1::ListEventsRequest* request,
                                             v1::ListEventsResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListEvents"); !s.ok()) return s;
  host_->Read([&](const Supervisor& core, absl::Time) {
    const size_t limit = request->limit() == 0 ? SIZE_MAX : request->limit();
    for (const Event& e : core.events().Since(request->after_id(), request->job_id(), limit)) {
      RenderEvent(e, response->add_events());
    }
    return 0;
  });
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::WatchEvents(grpc::ServerContext* context,
                                              const v1::WatchEventsRequest* request,
                                              grpc::ServerWriter<v1::Event>* writer) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "WatchEvents"); !s.ok()) return s;
  uint64_t after = request->after_id();
  // Wake up at least every second to notice a client that went away or a
  // server shutting down.
  while (!context->IsCancelled()) {
    uint64_t scanned_to = after;
    for (const Event& e :
         host_->WaitForEvents(after, request->job_id(), absl::Seconds(1), &scanned_to)) {
      v1::Event out;
      RenderEvent(e, &out);
      if (!writer->Write(out)) return grpc::Status::OK;
    }
    after = scanned_to;
  }
  return grpc::Status::OK;
}

namespace {

grpc::Status Answer(const absl::StatusOr<std::string>& result, v1::ActionResponse* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->set_message(*result);
  return grpc::Status::OK;
}

}  // namespace

namespace {

void RenderMtbf(const MtbfEstimate& m, v1::Mtbf* out) {
  out->set_exposure_seconds(m.exposure_seconds);
  out->set_failures(static_cast<uint32_t>(m.failures));
  out->set_mtbf_seconds(m.mtbf_seconds);
  out->set_lower_seconds(m.lower_seconds);
  out->set_upper_seconds(m.upper_seconds);
  out->set_confidence(m.confidence);
  out->set_conservative_seconds(m.conservative_seconds);
}

void RenderLedger(const LedgerTotals& t, v1::LedgerBuckets* out) {
  out->set_useful_seconds(t.seconds[static_cast<int>(Bucket::kUseful)]);
  out->set_starved_seconds(t.seconds[static_cast<int>(Bucket::kStarved)]);
  out->set_checkpoint_blocked_seconds(t.seconds[static_cast<int>(Bucket::kCheckpointBlocked)]);
  out->set_lost_seconds(t.seconds[static_cast<int>(Bucket::kLost)]);
  out->set_wall_seconds(t.wall_seconds());
  out->set_goodput(t.goodput());
}

}  // namespace

grpc::Status OperatorServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                         v1::JobDetail* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetJob"); !s.ok()) return s;
  return host_->Read([&](const Supervisor& core, absl::Time now) {
    const JobEntry* entry = core.FindEntry(request->job_id());
    if (entry == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no job '", request->job_id(), "'"));
    }
    const JobView view = core.ViewOf(*entry, now);
    RenderJob(view, response->mutable_job());
    RenderMtbf(view.mtbf, response->mutable_job_mtbf());
    RenderMtbf(core.ClusterMtbf(now), response->mutable_cluster_mtbf());
    response->set_checkpoint_cost_seconds(view.checkpoint_cost.seconds);
    response->set_checkpoint_cost_measured(view.checkpoint_cost.measured);
    response->set_checkpoint_async_seconds(view.checkpoint_async_s);
    response->set_restart_cost_seconds(view.restart_cost.seconds);
    response->set_restart_cost_measured(view.restart_cost.measured);
    if (const std::optional<CheckpointPlan>& p = entry->plans.figures(); p) {
      response->set_young_interval_seconds(p->young_interval_seconds);
      response->set_daly_interval_seconds(p->daly_interval_seconds);
      response->set_planned_interval_seconds(p->interval_seconds);
      response->set_expected_waste_fraction(p->at_interval.total_waste_fraction);
      response->set_plan_verdict(p->verdict_text);
      for (const std::string& w : p->warnings) response->add_plan_warnings(w);
    }
    for (const CheckpointPlanSpec& spec : entry->plans.plans()) {
      v1::PlanSpec* out = response->add_plans();
      out->set_plan_id(spec.plan_id);
      out->set_anchor_step(spec.anchor_step);
      out->set_interval_steps(spec.interval_steps);
      out->set_effective_from_step(spec.effective_from_step);
      for (int64_t s : spec.one_off_steps) out->add_one_off_steps(s);
    }
    response->set_next_checkpoint_step(view.next_checkpoint_step);
    RenderLedger(entry->ledger.totals(), response->mutable_ledger());
    for (const auto& [generation, totals] : entry->ledger.by_generation()) {
      v1::GenerationLedger* g = response->add_generations();
      g->set_generation(generation);
      RenderLedger(totals, g->mutable_buckets());
    }
    return grpc::Status::OK;
  });
}

grpc::Status OperatorServiceImpl::GetStacks(grpc::ServerContext* context,
                                            const v1::GetStacksRequest* request,
                                            v1::StacksResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetStacks"); !s.ok()) return s;
  return host_->Read([&](const Supervisor& core, absl::Time) {
    if (core.FindEntry(request->job_id()) == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no job '", request->job_id(), "'"));
    }
    const JobStacks* stacks = core.FindStacks(request->job_id(), request->generation());
    if (stacks == nullptr) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          request->generation() == 0
              ? absl::StrCat("job '", request->job_id(), "' has no stacks: they are collected "
                             "when it hangs, before its ranks are stopped")
              : absl::StrCat("job '", request->job_id(), "' has no stacks of generation ",
                             request->generation()));
    }
    response->set_job_id(request->job_id());
    response->set_generation(stacks->generation);
    response->set_event_id(stacks->event_id);
    SetTimestamp(stacks->time, response->mutable_time());
    response->set_collect_seconds(stacks->collect_seconds);
    for (const StackGroup& group : GroupStacks(*stacks)) {
      v1::StackGroup* out = response->add_groups();
      for (uint32_t rank : group.ranks) out->add_ranks(rank);
      for (const std::string& node : group.nodes) out->add_nodes(node);
      out->set_stack(group.stack);
      out->set_culprit(group.culprit);
    }
    for (uint32_t rank : UnansweredRanks(*stacks)) response->add_unanswered_ranks(rank);
    return grpc::Status::OK;
  });
}

grpc::Status OperatorServiceImpl::RequestCheckpoint(grpc::ServerContext* context,
                                                    const v1::RequestCheckpointRequest* request,
                                                    v1::ActionResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kMutate, "RequestCheckpoint"); !s.ok()) return s;
  return Answer(host_->RequestCheckpoint(request->job_id()), response);
}

grpc::Status OperatorServiceImpl::ResumeJob(grpc::ServerContext* context, const v1::ResumeJobRequest* request,
                                            v1::ActionResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kMutate, "ResumeJob"); !s.ok()) return s;
  return Answer(host_->Resume(request->job_id()), response);
}

grpc::Status OperatorServiceImpl::QuarantineNode(grpc::ServerContext* context,
                                                 const v1::QuarantineNodeRequest* request,
                                                 v1::ActionResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kMutate, "QuarantineNode"); !s.ok()) return s;
  if (request->reason().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a reason is required");
  }
  return Answer(host_->Quarantine(request->node(), request->reason(), request->force()), response);
}

grpc::Status OperatorServiceImpl::UnquarantineNode(grpc::ServerContext* context,
                                                   const v1::UnquarantineNodeRequest* request,
                                                   v1::ActionResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kMutate, "UnquarantineNode"); !s.ok()) return s;
  return Answer(host_->Unquarantine(request->node()), response);
}

}  // namespace trainsup
