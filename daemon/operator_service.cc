#include "daemon/operator_service.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/format.h"
#include "daemon/operator_snapshot.h"
#include "daemon/proto_convert.h"

namespace trainsup {
namespace {

// Ranks in one ListRanks answer at most (~110 bytes each: well inside gRPC's
// 4 MiB message limit); StreamRanks pages hold kRanksPerPage.
constexpr size_t kMaxRanksPerAnswer = 16384;
constexpr size_t kRanksPerPage = 4096;

grpc::Status NoJob(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no job '", id, "'"));
}

// Fills what every ListRanks answer and every StreamRanks page carries.
void SetRanksHeader(const JobSnapshot& job, const RankSelection& selection, absl::Time as_of,
                    v1::ListRanksResponse* out) {
  out->set_job_id(job.detail.job().job_id());
  out->set_world_size(job.detail.job().world_size());
  out->set_matched(selection.matched);
  SetTimestamp(as_of, out->mutable_as_of());
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

void RenderDiagnosis(const Diagnosis& d, absl::Time as_of, v1::DiagnoseResponse* out) {
  out->set_job_id(d.job);
  out->set_verdict(std::string(DiagnosisVerdictName(d.verdict)));
  out->set_headline(d.headline);
  out->set_state(std::string(JobStateName(d.state)));
  for (const Finding& f : d.findings) {
    v1::Finding* o = out->add_findings();
    o->set_check(std::string(DiagnosisCheckName(f.check)));
    o->set_status(std::string(FindingStatusName(f.status)));
    o->set_summary(f.summary);
    o->set_fix(f.fix);
    o->set_command(f.command);
    if (f.rank) o->set_rank(*f.rank);
    o->set_node(f.node);
    for (const auto& [name, value] : f.figures) (*o->mutable_figures())[name] = value;
    o->set_handling(f.handling);
    o->set_stack(f.stack);
    o->set_event_id(f.event_id);
  }
  RenderLedger(d.ledger, out->mutable_ledger());
  SetTimestamp(as_of, out->mutable_as_of());
}

}  // namespace

grpc::Status OperatorServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                           v1::ListJobsResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListJobs"); !s.ok()) return s;
  const std::shared_ptr<const OperatorSnapshot> snapshot = host_->Snapshot();
  for (const auto& job : snapshot->jobs) *response->add_jobs() = job->detail.job();
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::ListRanks(grpc::ServerContext* context, const v1::ListRanksRequest* request,
                                            v1::ListRanksResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListRanks"); !s.ok()) return s;
  const std::shared_ptr<const OperatorSnapshot> snapshot = host_->Snapshot();
  const JobSnapshot* job = snapshot->FindJob(request->job_id());
  if (job == nullptr) return NoJob(request->job_id());
  const RankSelection selection = SelectRanks(*snapshot, *job, *request);
  if (selection.rows.size() > kMaxRanksPerAnswer) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(selection.rows.size(), " ranks match, more than one answer carries (",
                     kMaxRanksPerAnswer, "): ask for the top N (trainsupctl ranks --top N), a "
                     "node or a flag, or the streamed listing (StreamRanks; trainsupctl ranks "
                     "--all, -o json)"));
  }
  const absl::Time now = host_->clock().Now();
  SetRanksHeader(*job, selection, snapshot->taken, response);
  SummarizeRanks(*job, now, response->mutable_summary());
  response->mutable_ranks()->Reserve(static_cast<int>(selection.rows.size()));
  for (const RankView* row : selection.rows) {
    RenderRank(*snapshot, *job, *row, now, response->add_ranks());
  }
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::StreamRanks(grpc::ServerContext* context,
                                              const v1::ListRanksRequest* request,
                                              grpc::ServerWriter<v1::ListRanksResponse>* writer) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "StreamRanks"); !s.ok()) return s;
  // One snapshot for every page: the listing is consistent however long the
  // client takes to read it.
  const std::shared_ptr<const OperatorSnapshot> snapshot = host_->Snapshot();
  const JobSnapshot* job = snapshot->FindJob(request->job_id());
  if (job == nullptr) return NoJob(request->job_id());
  const RankSelection selection = SelectRanks(*snapshot, *job, *request);
  const absl::Time now = host_->clock().Now();
  size_t next = 0;
  do {
    v1::ListRanksResponse page;
    SetRanksHeader(*job, selection, snapshot->taken, &page);
    if (next == 0) SummarizeRanks(*job, now, page.mutable_summary());
    const size_t end = std::min(selection.rows.size(), next + kRanksPerPage);
    for (; next < end; ++next) RenderRank(*snapshot, *job, *selection.rows[next], now, page.add_ranks());
    if (context->IsCancelled() || !writer->Write(page)) return grpc::Status::CANCELLED;
  } while (next < selection.rows.size());
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest*,
                                            v1::ListNodesResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListNodes"); !s.ok()) return s;
  const std::shared_ptr<const OperatorSnapshot> snapshot = host_->Snapshot();
  const absl::Time now = host_->clock().Now();
  response->mutable_nodes()->Reserve(static_cast<int>(snapshot->nodes.size()));
  for (const NodeView& node : snapshot->nodes) RenderNode(node, now, response->add_nodes());
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::ListEvents(grpc::ServerContext* context,
                                             const v1::ListEventsRequest* request,
                                             v1::ListEventsResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListEvents"); !s.ok()) return s;
  const size_t limit = request->limit() == 0 ? SIZE_MAX : request->limit();
  for (const Event& e : host_->Events(request->after_id(), request->job_id(), limit)) {
    RenderEvent(e, response->add_events());
  }
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

grpc::Status OperatorServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                         v1::JobDetail* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetJob"); !s.ok()) return s;
  const std::shared_ptr<const OperatorSnapshot> snapshot = host_->Snapshot();
  const JobSnapshot* job = snapshot->FindJob(request->job_id());
  if (job == nullptr) return NoJob(request->job_id());
  *response = job->detail;
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::GetStacks(grpc::ServerContext* context,
                                            const v1::GetStacksRequest* request,
                                            v1::StacksResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetStacks"); !s.ok()) return s;
  return host_->Read([&](const Supervisor& core, absl::Time) {
    const absl::StatusOr<std::optional<StacksView>> found =
        core.StacksOf(request->job_id(), request->generation());
    if (!found.ok()) return NoJob(request->job_id());
    if (!found->has_value()) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          request->generation() == 0
              ? absl::StrCat("job '", request->job_id(), "' has no stacks: they are collected "
                             "when it hangs, before its ranks are stopped")
              : absl::StrCat("job '", request->job_id(), "' has no stacks of generation ",
                             request->generation()));
    }
    const StacksView& stacks = **found;
    response->set_job_id(request->job_id());
    response->set_generation(stacks.generation);
    response->set_event_id(stacks.event_id);
    SetTimestamp(stacks.time, response->mutable_time());
    response->set_collect_seconds(stacks.collect_seconds);
    for (const StackGroup& group : stacks.groups) {
      v1::StackGroup* out = response->add_groups();
      for (uint32_t rank : group.ranks) out->add_ranks(rank);
      for (const std::string& node : group.nodes) out->add_nodes(node);
      out->set_stack(group.stack);
      out->set_culprit(group.culprit);
    }
    for (uint32_t rank : stacks.unanswered) response->add_unanswered_ranks(rank);
    if (stacks.flight_records > 0 || !stacks.unread_dumps.empty()) {
      const CollectiveCulprit& c = stacks.collective;
      v1::CollectiveFinding* out = response->mutable_collective();
      out->set_evidence(CulpritEvidenceName(c.evidence));
      out->set_pg(c.pg);
      out->set_pg_desc(c.pg_desc);
      out->set_p2p(c.p2p);
      out->set_seq(c.seq);
      out->set_op(c.op);
      for (uint32_t rank : c.not_entered) out->add_not_entered(rank);
      for (uint32_t rank : c.waiting) out->add_waiting(rank);
      for (uint32_t rank : c.without_dump) out->add_without_dump(rank);
      out->set_text(stacks.flight_records > 0 ? c.text : "no dump could be read");
      out->set_dumps(static_cast<uint32_t>(stacks.flight_records));
      for (const auto& [rank, why] : stacks.unread_dumps) {
        out->add_unread_dumps(absl::StrCat("rank ", rank, ": ", why));
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status OperatorServiceImpl::Diagnose(grpc::ServerContext* context,
                                           const v1::DiagnoseRequest* request,
                                           v1::DiagnoseResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "Diagnose"); !s.ok()) return s;
  // Under the core's shared lock, like GetStacks: an operator's occasional
  // read of what the snapshots leave out (the job's stacks and events).
  return host_->Read([&](const Supervisor& core, absl::Time now) {
    const absl::StatusOr<Diagnosis> diagnosis = core.Diagnose(request->job_id(), now);
    if (!diagnosis.ok()) return NoJob(request->job_id());
    RenderDiagnosis(*diagnosis, now, response);
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

grpc::Status OperatorServiceImpl::SetKillCriteria(grpc::ServerContext* context,
                                                  const v1::SetKillCriteriaRequest* request,
                                                  v1::ActionResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kMutate, "SetKillCriteria"); !s.ok()) {
    return s;
  }
  std::optional<KillCriteriaSpec> spec;
  if (!request->clear()) spec = FromProto(request->criteria());
  return Answer(host_->SetKillCriteria(request->job_id(), spec), response);
}

grpc::Status OperatorServiceImpl::ListKillCriteria(grpc::ServerContext* context,
                                                   const v1::ListKillCriteriaRequest* request,
                                                   v1::ListKillCriteriaResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "ListKillCriteria"); !s.ok()) {
    return s;
  }
  // Under the core's shared lock: an operator's occasional read.
  return host_->Read([&](const Supervisor& core, absl::Time) {
    const absl::StatusOr<std::vector<KillCriteriaView>> views =
        core.KillCriteriaOf(request->job_id());
    if (!views.ok()) return NoJob(request->job_id());
    for (const KillCriteriaView& view : *views) {
      v1::JobKillCriteria* out = response->add_jobs();
      out->set_job_id(view.job);
      out->set_state(view.state);
      out->set_source(view.source);
      ToProto(view.spec, out->mutable_criteria());
      out->set_fired(view.fired);
      for (const CriterionStatus& s : view.status) {
        v1::KillCriterionStatus* status = out->add_status();
        status->set_criterion(std::string(KillCriterionName(s.kind)));
        status->set_judged(s.judged);
        status->set_ratio(s.ratio);
        status->set_loss(s.loss);
        status->set_limit(s.limit);
        status->set_step(s.step);
        status->set_spikes(s.spikes);
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status OperatorServiceImpl::GetSupervisorStatus(grpc::ServerContext* context,
                                                      const v1::GetSupervisorStatusRequest*,
                                                      v1::SupervisorStatus* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetSupervisorStatus"); !s.ok()) {
    return s;
  }
  if (status_) *response = status_();
  return grpc::Status::OK;
}

grpc::Status OperatorServiceImpl::GetProvenance(grpc::ServerContext* context,
                                                const v1::GetProvenanceRequest* request,
                                                v1::ProvenanceResponse* response) {
  if (grpc::Status s = access_->Check(*context, Access::kRead, "GetProvenance"); !s.ok()) {
    return s;
  }
  absl::StatusOr<v1::ProvenanceResponse> provenance =
      host_->ProvenanceOf(request->job_id(), request->generation());
  if (!provenance.ok()) return ToGrpcStatus(provenance.status());
  *response = std::move(*provenance);
  return grpc::Status::OK;
}

}  // namespace trainsup
