#include "cli/client.h"

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/options.h"

namespace trainsup {

OperatorClient::OperatorClient(const std::string& address, absl::Duration timeout,
                               std::shared_ptr<grpc::Channel> channel)
    : address_(address), timeout_(timeout), stub_(v1::OperatorService::NewStub(channel)) {}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeOperatorChannel(const std::string& address,
                                                                  const ClientTlsOptions& tls,
                                                                  const std::string& token) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(tls, token);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  ApplyServerName(tls, &args);
  return grpc::CreateCustomChannel(address, *credentials, args);
}

std::unique_ptr<grpc::ClientContext> OperatorClient::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  return context;
}

namespace {

// Names the supervisor in "cannot reach" errors and says "refused" of its
// refusals; leaves others as they are.
absl::Status Explain(const grpc::Status& status, const std::string& address) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::UnavailableError(
          absl::StrCat("cannot reach the supervisor at ", address, ": ", status.error_message()));
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED: {
      absl::Status refused = FromGrpcStatus(status);
      return absl::Status(refused.code(),
                          absl::StrCat("refused by the supervisor: ", refused.message()));
    }
    default:
      return FromGrpcStatus(status);
  }
}

}  // namespace

template <typename Response, typename Call>
absl::StatusOr<Response> OperatorClient::Unary(Call call) {
  Response response;
  grpc::Status s = call(Context().get(), &response);
  if (!s.ok()) return Explain(s, address_);
  return response;
}

absl::StatusOr<v1::ListJobsResponse> OperatorClient::ListJobs() {
  return Unary<v1::ListJobsResponse>([&](grpc::ClientContext* c, v1::ListJobsResponse* r) {
    return stub_->ListJobs(c, v1::ListJobsRequest(), r);
  });
}

absl::StatusOr<v1::ListRanksResponse> OperatorClient::ListRanks(
    const v1::ListRanksRequest& request) {
  return Unary<v1::ListRanksResponse>([&](grpc::ClientContext* c, v1::ListRanksResponse* r) {
    return stub_->ListRanks(c, request, r);
  });
}

absl::StatusOr<v1::ListRanksResponse> OperatorClient::StreamRanks(
    const v1::ListRanksRequest& request) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  std::unique_ptr<grpc::ClientReader<v1::ListRanksResponse>> reader =
      stub_->StreamRanks(context.get(), request);
  v1::ListRanksResponse all;
  v1::ListRanksResponse page;
  bool first = true;
  while (reader->Read(&page)) {
    if (first) {
      all = std::move(page);  // the header and the summary come with the first page
      first = false;
    } else {
      for (v1::Rank& r : *page.mutable_ranks()) *all.add_ranks() = std::move(r);
    }
    page.Clear();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Explain(s, address_);
  return all;
}

absl::StatusOr<v1::ListNodesResponse> OperatorClient::ListNodes() {
  return Unary<v1::ListNodesResponse>([&](grpc::ClientContext* c, v1::ListNodesResponse* r) {
    return stub_->ListNodes(c, v1::ListNodesRequest(), r);
  });
}

absl::StatusOr<v1::ListEventsResponse> OperatorClient::ListEvents(const std::string& job_id,
                                                                  uint64_t after_id) {
  v1::ListEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_id(after_id);
  return Unary<v1::ListEventsResponse>([&](grpc::ClientContext* c, v1::ListEventsResponse* r) {
    return stub_->ListEvents(c, request, r);
  });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::ResumeJob(const std::string& job_id) {
  v1::ResumeJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ActionResponse>([&](grpc::ClientContext* c, v1::ActionResponse* r) {
    return stub_->ResumeJob(c, request, r);
  });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::SetKillCriteria(
    const std::string& job_id, const std::optional<v1::KillCriteria>& criteria) {
  v1::SetKillCriteriaRequest request;
  request.set_job_id(job_id);
  if (criteria) {
    *request.mutable_criteria() = *criteria;
  } else {
    request.set_clear(true);
  }
  return Unary<v1::ActionResponse>([&](grpc::ClientContext* c, v1::ActionResponse* r) {
    return stub_->SetKillCriteria(c, request, r);
  });
}

absl::StatusOr<v1::ListKillCriteriaResponse> OperatorClient::ListKillCriteria(
    const std::string& job_id) {
  v1::ListKillCriteriaRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ListKillCriteriaResponse>(
      [&](grpc::ClientContext* c, v1::ListKillCriteriaResponse* r) {
        return stub_->ListKillCriteria(c, request, r);
      });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::QuarantineNode(const std::string& node,
                                                                  const std::string& reason,
                                                                  bool force) {
  v1::QuarantineNodeRequest request;
  request.set_node(node);
  request.set_reason(reason);
  request.set_force(force);
  return Unary<v1::ActionResponse>([&](grpc::ClientContext* c, v1::ActionResponse* r) {
    return stub_->QuarantineNode(c, request, r);
  });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::UnquarantineNode(const std::string& node) {
  v1::UnquarantineNodeRequest request;
  request.set_node(node);
  return Unary<v1::ActionResponse>([&](grpc::ClientContext* c, v1::ActionResponse* r) {
    return stub_->UnquarantineNode(c, request, r);
  });
}

absl::StatusOr<v1::JobDetail> OperatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::JobDetail>([&](grpc::ClientContext* c, v1::JobDetail* r) {
    return stub_->GetJob(c, request, r);
  });
}

absl::StatusOr<v1::StacksResponse> OperatorClient::GetStacks(const std::string& job_id,
                                                             uint64_t generation) {
  v1::GetStacksRequest request;
  request.set_job_id(job_id);
  request.set_generation(generation);
  return Unary<v1::StacksResponse>([&](grpc::ClientContext* c, v1::StacksResponse* r) {
    return stub_->GetStacks(c, request, r);
  });
}

absl::StatusOr<v1::ProvenanceResponse> OperatorClient::GetProvenance(const std::string& job_id,
                                                                     uint64_t generation) {
  v1::GetProvenanceRequest request;
  request.set_job_id(job_id);
  request.set_generation(generation);
  return Unary<v1::ProvenanceResponse>([&](grpc::ClientContext* c, v1::ProvenanceResponse* r) {
    return stub_->GetProvenance(c, request, r);
  });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::RequestCheckpoint(const std::string& job_id) {
  v1::RequestCheckpointRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ActionResponse>([&](grpc::ClientContext* c, v1::ActionResponse* r) {
    return stub_->RequestCheckpoint(c, request, r);
  });
}

absl::StatusOr<v1::DiagnoseResponse> OperatorClient::Diagnose(const std::string& job_id) {
  v1::DiagnoseRequest request;
  request.set_job_id(job_id);
  return Unary<v1::DiagnoseResponse>([&](grpc::ClientContext* c, v1::DiagnoseResponse* r) {
    return stub_->Diagnose(c, request, r);
  });
}

absl::Status OperatorClient::WatchEvents(const std::string& job_id, uint64_t after_id,
                                         const std::function<bool(const v1::Event&)>& on_event) {
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_id(after_id);
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stub_->WatchEvents(&context, request);
  v1::Event event;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) return Explain(s, address_);
  return absl::OkStatus();
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitDenied;
    default:
      return kExitFailure;
  }
}

}  // namespace trainsup
