#ifndef TRAINSUP_CLI_CLIENT_H_
#define TRAINSUP_CLI_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/credentials.h"
#include "common/supervisor_addresses.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {

// trainsupctl's calls to OperatorService, each with a deadline. Calls go to
// the leader of the trainsupd instances given (docs/ha.md): a call that a
// standby refused goes again to the leader it named, one that reached no one
// to the next address of the list, with a backoff (50ms doubling to 1s) and
// within the call's deadline. Reads too are served by the leader only.
class OperatorClient {
 public:
  // One address; `channel` from MakeOperatorChannel. A leader named by a
  // standby there is called in plain text.
  OperatorClient(const std::string& address, absl::Duration timeout,
                 std::shared_ptr<grpc::Channel> channel);
  // Any number of addresses, each called with `tls` and `token` (see
  // MakeOperatorChannel).
  OperatorClient(SupervisorAddresses addresses, absl::Duration timeout, ClientTlsOptions tls,
                 std::string token);

  absl::StatusOr<v1::ListJobsResponse> ListJobs();
  // Sorted, filtered and limited by the supervisor (see ListRanksRequest).
  absl::StatusOr<v1::ListRanksResponse> ListRanks(const v1::ListRanksRequest& request);
  // The same listing streamed in pages, gathered into one answer: any number
  // of ranks, within gRPC's message limits. The deadline covers the whole
  // listing.
  absl::StatusOr<v1::ListRanksResponse> StreamRanks(const v1::ListRanksRequest& request);
  absl::StatusOr<v1::ListNodesResponse> ListNodes();
  absl::StatusOr<v1::SupervisorStatus> GetSupervisorStatus();
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
  using ChannelFn =
      std::function<absl::StatusOr<std::shared_ptr<grpc::Channel>>(const std::string& address)>;
  OperatorClient(SupervisorAddresses addresses, absl::Duration timeout, ChannelFn channels);
  // What a call may do again on another instance: a read also after its
  // attempt's deadline passed, a change only when it surely was not done
  // (refused by a standby, or no connection).
  enum class Retry { kRead, kChange };
  // One call to the leader within the deadline: `call(stub, context,
  // &response)` per attempt, on the instances as the class comment says;
  // failures are explained (a supervisor that cannot be reached is named).
  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(Call call, Retry retry = Retry::kRead);
  // The stub of the instance to call now, or why there is none.
  absl::StatusOr<v1::OperatorService::Stub*> Stub();

  SupervisorAddresses addresses_;
  const absl::Duration timeout_;
  const ChannelFn channels_;
  std::map<std::string, std::unique_ptr<v1::OperatorService::Stub>> stubs_;
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
