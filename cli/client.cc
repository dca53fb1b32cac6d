#include "cli/client.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/options.h"

namespace trainsup {

OperatorClient::OperatorClient(SupervisorAddresses addresses, absl::Duration timeout,
                               ChannelFn channels)
    : addresses_(std::move(addresses)), timeout_(timeout), channels_(std::move(channels)) {}

OperatorClient::OperatorClient(const std::string& address, absl::Duration timeout,
                               std::shared_ptr<grpc::Channel> channel)
    : OperatorClient(*SupervisorAddresses::Parse(address), timeout,
                     [address, channel](const std::string& to)
                         -> absl::StatusOr<std::shared_ptr<grpc::Channel>> {
                       if (to == address) return channel;
                       return MakeOperatorChannel(to, ClientTlsOptions(), "");
                     }) {}

OperatorClient::OperatorClient(SupervisorAddresses addresses, absl::Duration timeout,
                               ClientTlsOptions tls, std::string token)
    : OperatorClient(std::move(addresses), timeout,
                     [tls = std::move(tls), token = std::move(token)](const std::string& to) {
                       return MakeOperatorChannel(to, tls, token);
                     }) {}

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

absl::StatusOr<v1::OperatorService::Stub*> OperatorClient::Stub() {
  std::unique_ptr<v1::OperatorService::Stub>& stub = stubs_[addresses_.current()];
  if (stub == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = channels_(addresses_.current());
    if (!channel.ok()) return channel.status();
    stub = v1::OperatorService::NewStub(*channel);
  }
  return stub.get();
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
absl::StatusOr<Response> OperatorClient::Unary(Call call, Retry retry) {
  constexpr int kMaxAttempts = 16;
  constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
  const size_t instances = addresses_.list().size();
  const absl::Time deadline = absl::Now() + timeout_;
  // With several instances one that never answers must not take the whole
  // deadline: each attempt gets a share of it (at least 1s).
  const absl::Duration attempt_timeout =
      instances > 1 ? std::max(timeout_ / static_cast<int64_t>(instances), absl::Seconds(1))
                    : timeout_;
  absl::Duration backoff = absl::Milliseconds(50);
  for (int attempt = 1;; ++attempt) {
    const std::string address = addresses_.current();
    absl::StatusOr<v1::OperatorService::Stub*> stub = Stub();
    if (!stub.ok()) return stub.status();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + attempt_timeout)));
    Response response;
    const grpc::Status s = call(*stub, &context, &response);
    if (s.ok()) return response;
    // A standby's refusal: the leader it named, "" when none (and no key
    // at all when no trainsupd refused).
    const std::optional<std::string> leader =
        s.error_code() == grpc::StatusCode::UNAVAILABLE ? LeaderNamedIn(context) : std::nullopt;
    const bool unreached =
        s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && retry == Retry::kRead);
    const bool elsewhere = instances > 1 || (leader.has_value() && !leader->empty());
    const absl::Duration left = deadline - absl::Now();
    if (!unreached || !elsewhere || attempt >= kMaxAttempts || left <= absl::ZeroDuration()) {
      return Explain(s, address);
    }
    const std::string& next = addresses_.Next(leader.value_or(""));
    // Straight to a leader just named; else wait, so as not to spin while no
    // instance leads.
    if (leader.has_value() && next == *leader) continue;
    absl::SleepFor(std::min(backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::StatusOr<v1::ListJobsResponse> OperatorClient::ListJobs() {
  return Unary<v1::ListJobsResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ListJobsResponse* r) {
        return stub->ListJobs(c, v1::ListJobsRequest(), r);
      });
}

absl::StatusOr<v1::ListRanksResponse> OperatorClient::ListRanks(
    const v1::ListRanksRequest& request) {
  return Unary<v1::ListRanksResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ListRanksResponse* r) {
        return stub->ListRanks(c, request, r);
      });
}

absl::StatusOr<v1::ListRanksResponse> OperatorClient::StreamRanks(
    const v1::ListRanksRequest& request) {
  return Unary<v1::ListRanksResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ListRanksResponse* all) {
        std::unique_ptr<grpc::ClientReader<v1::ListRanksResponse>> reader =
            stub->StreamRanks(c, request);
        v1::ListRanksResponse page;
        bool first = true;
        while (reader->Read(&page)) {
          if (first) {
            *all = std::move(page);  // the header and the summary come with the first page
            first = false;
          } else {
            for (v1::Rank& r : *page.mutable_ranks()) *all->add_ranks() = std::move(r);
          }
          page.Clear();
        }
        return reader->Finish();
      });
}

absl::StatusOr<v1::ListNodesResponse> OperatorClient::ListNodes() {
  return Unary<v1::ListNodesResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ListNodesResponse* r) {
        return stub->ListNodes(c, v1::ListNodesRequest(), r);
      });
}

absl::StatusOr<v1::SupervisorStatus> OperatorClient::GetSupervisorStatus() {
  return Unary<v1::SupervisorStatus>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::SupervisorStatus* r) {
        return stub->GetSupervisorStatus(c, v1::GetSupervisorStatusRequest(), r);
      });
}

absl::StatusOr<v1::ListEventsResponse> OperatorClient::ListEvents(const std::string& job_id,
                                                                  uint64_t after_id) {
  v1::ListEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_id(after_id);
  return Unary<v1::ListEventsResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ListEventsResponse* r) {
        return stub->ListEvents(c, request, r);
      });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::ResumeJob(const std::string& job_id) {
  v1::ResumeJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ActionResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ActionResponse* r) {
        return stub->ResumeJob(c, request, r);
      },
      Retry::kChange);
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
  return Unary<v1::ActionResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ActionResponse* r) {
        return stub->SetKillCriteria(c, request, r);
      },
      Retry::kChange);
}

absl::StatusOr<v1::ListKillCriteriaResponse> OperatorClient::ListKillCriteria(
    const std::string& job_id) {
  v1::ListKillCriteriaRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ListKillCriteriaResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c,
          v1::ListKillCriteriaResponse* r) { return stub->ListKillCriteria(c, request, r); });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::QuarantineNode(const std::string& node,
                                                                  const std::string& reason,
                                                                  bool force) {
  v1::QuarantineNodeRequest request;
  request.set_node(node);
  request.set_reason(reason);
  request.set_force(force);
  return Unary<v1::ActionResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ActionResponse* r) {
        return stub->QuarantineNode(c, request, r);
      },
      Retry::kChange);
}

absl::StatusOr<v1::ActionResponse> OperatorClient::UnquarantineNode(const std::string& node) {
  v1::UnquarantineNodeRequest request;
  request.set_node(node);
  return Unary<v1::ActionResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ActionResponse* r) {
        return stub->UnquarantineNode(c, request, r);
      },
      Retry::kChange);
}

absl::StatusOr<v1::JobDetail> OperatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::JobDetail>([&](v1::OperatorService::Stub* stub, grpc::ClientContext* c,
                                  v1::JobDetail* r) { return stub->GetJob(c, request, r); });
}

absl::StatusOr<v1::StacksResponse> OperatorClient::GetStacks(const std::string& job_id,
                                                             uint64_t generation) {
  v1::GetStacksRequest request;
  request.set_job_id(job_id);
  request.set_generation(generation);
  return Unary<v1::StacksResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::StacksResponse* r) {
        return stub->GetStacks(c, request, r);
      });
}

absl::StatusOr<v1::ProvenanceResponse> OperatorClient::GetProvenance(const std::string& job_id,
                                                                     uint64_t generation) {
  v1::GetProvenanceRequest request;
  request.set_job_id(job_id);
  request.set_generation(generation);
  return Unary<v1::ProvenanceResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ProvenanceResponse* r) {
        return stub->GetProvenance(c, request, r);
      });
}

absl::StatusOr<v1::ActionResponse> OperatorClient::RequestCheckpoint(const std::string& job_id) {
  v1::RequestCheckpointRequest request;
  request.set_job_id(job_id);
  return Unary<v1::ActionResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::ActionResponse* r) {
        return stub->RequestCheckpoint(c, request, r);
      },
      Retry::kChange);
}

absl::StatusOr<v1::DiagnoseResponse> OperatorClient::Diagnose(const std::string& job_id) {
  v1::DiagnoseRequest request;
  request.set_job_id(job_id);
  return Unary<v1::DiagnoseResponse>(
      [&](v1::OperatorService::Stub* stub, grpc::ClientContext* c, v1::DiagnoseResponse* r) {
        return stub->Diagnose(c, request, r);
      });
}

absl::Status OperatorClient::WatchEvents(const std::string& job_id, uint64_t after_id,
                                         const std::function<bool(const v1::Event&)>& on_event) {
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_job_id(job_id);
  request.set_after_id(after_id);
  const std::string address = addresses_.current();
  absl::StatusOr<v1::OperatorService::Stub*> stub = Stub();
  if (!stub.ok()) return stub.status();
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader = (*stub)->WatchEvents(&context, request);
  v1::Event event;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (s.ok() || s.error_code() == grpc::StatusCode::CANCELLED) return absl::OkStatus();
  // The next call starts at the leader named, or at the next instance.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    addresses_.Next(LeaderNamedIn(context).value_or(""));
  }
  return Explain(s, address);
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
