#ifndef TRAINSUP_CLI_CLIENT_H_
#define TRAINSUP_CLI_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/credentials.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {

// trainsupctl's calls to OperatorService, each with a deadline.
class OperatorClient {
 public:
  // `channel` from MakeOperatorChannel.
  OperatorClient(const std::string& address, absl::Duration timeout,
                 std::shared_ptr<grpc::Channel> channel);

  absl::StatusOr<v1::ListJobsResponse> ListJobs();
  // Sorted, filtered and limited by the supervisor (see ListRanksRequest).
  absl::StatusOr<v1::ListRanksResponse> ListRanks(const v1::ListRanksRequest& request);
  // The same listing streamed in pages, gathered into one answer: any number
  // of ranks, within gRPC's message limits. The deadline covers the whole
  // listing.
  absl::StatusOr<v1::ListRanksResponse> StreamRanks(const v1::ListRanksRequest& request);
  absl::StatusOr<v1::ListNodesResponse> ListNodes();
  // The kept events of `job_id` ("": all jobs) after `after_id`, oldest first.
  absl::StatusOr<v1::ListEventsResponse> ListEvents(const std::string& job_id,
                                                    uint64_t after_id = 0);
  absl::StatusOr<v1::ActionResponse> ResumeJob(const std::string& job_id);
  // `criteria` nullopt: clear the operator's.
  absl::StatusOr<v1::ActionResponse> SetKillCriteria(
      const std::string& job_id, const std::optional<v1::KillCriteria>& criteria);
  absl::StatusOr<v1::ListKillCriteriaResponse> ListKillCriteria(const std::string& job_id);
  // `force`: even past the supervisor's --quarantine-max-fraction.
  absl::StatusOr<v1::ActionResponse> QuarantineNode(const std::string& node,
                                                    const std::string& reason, bool force = false);
  absl::StatusOr<v1::ActionResponse> UnquarantineNode(const std::string& node);
  absl::StatusOr<v1::JobDetail> GetJob(const std::string& job_id);
  absl::StatusOr<v1::StacksResponse> GetStacks(const std::string& job_id, uint64_t generation);
  absl::StatusOr<v1::ActionResponse> RequestCheckpoint(const std::string& job_id);
  absl::StatusOr<v1::DiagnoseResponse> Diagnose(const std::string& job_id);
  absl::StatusOr<v1::ProvenanceResponse> GetProvenance(const std::string& job_id,
                                                       uint64_t generation);
  // Streams the events after `after_id`, then new ones, to `on_event` until
  // the stream ends or `on_event` returns false. No deadline: it follows.
  absl::Status WatchEvents(const std::string& job_id, uint64_t after_id,
                           const std::function<bool(const v1::Event&)>& on_event);

 private:
  std::unique_ptr<grpc::ClientContext> Context() const;
  // One unary call with the deadline: `call(context, &response)`; failures
  // are explained (a supervisor that cannot be reached is named).
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(Call call);

  const std::string address_;
  const absl::Duration timeout_;
  std::unique_ptr<v1::OperatorService::Stub> stub_;
};

// A channel to trainsupd: TLS per `tls`, and the operator `token` (a bearer
// token, needs TLS) when not empty. Errors name the file or option at fault.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeOperatorChannel(const std::string& address,
                                                                  const ClientTlsOptions& tls,
                                                                  const std::string& token);

// The exit code for a failed call: kExitUnreachable when the supervisor could
// not be reached, kExitNotFound for NOT_FOUND, else kExitFailure.
int ExitCodeFor(const absl::Status& status);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_CLIENT_H_
