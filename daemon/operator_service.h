#ifndef TRAINSUP_DAEMON_OPERATOR_SERVICE_H_
#define TRAINSUP_DAEMON_OPERATOR_SERVICE_H_

#include <functional>
#include <utility>

#include "daemon/access_control.h"
#include "daemon/supervisor_host.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {

// gRPC adapter of OperatorService (trainsupctl's API): reads the core's state
// under the host's shared lock and renders it as wire messages. Every call
// first asks AccessControl whether its caller may read or change things.
class OperatorServiceImpl final : public v1::OperatorService::Service {
 public:
  // `status`: what GetSupervisorStatus answers.
  OperatorServiceImpl(SupervisorHost* host, AccessControl* access,
                      std::function<v1::SupervisorStatus()> status = nullptr)
      : host_(host), access_(access), status_(std::move(status)) {}

  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status ListRanks(grpc::ServerContext* context, const v1::ListRanksRequest* request,
                         v1::ListRanksResponse* response) override;
  grpc::Status StreamRanks(grpc::ServerContext* context, const v1::ListRanksRequest* request,
                           grpc::ServerWriter<v1::ListRanksResponse>* writer) override;
  grpc::Status ListNodes(grpc::ServerContext* context, const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;
  grpc::Status ListEvents(grpc::ServerContext* context, const v1::ListEventsRequest* request,
                          v1::ListEventsResponse* response) override;
  grpc::Status WatchEvents(grpc::ServerContext* context, const v1::WatchEventsRequest* request,
                           grpc::ServerWriter<v1::Event>* writer) override;
  grpc::Status ResumeJob(grpc::ServerContext* context, const v1::ResumeJobRequest* request,
                         v1::ActionResponse* response) override;
  grpc::Status QuarantineNode(grpc::ServerContext* context,
                              const v1::QuarantineNodeRequest* request,
                              v1::ActionResponse* response) override;
  grpc::Status UnquarantineNode(grpc::ServerContext* context,
                                const v1::UnquarantineNodeRequest* request,
                                v1::ActionResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::JobDetail* response) override;
  grpc::Status GetStacks(grpc::ServerContext* context, const v1::GetStacksRequest* request,
                         v1::StacksResponse* response) override;
  grpc::Status Diagnose(grpc::ServerContext* context, const v1::DiagnoseRequest* request,
                        v1::DiagnoseResponse* response) override;
  grpc::Status SetKillCriteria(grpc::ServerContext* context,
                               const v1::SetKillCriteriaRequest* request,
                               v1::ActionResponse* response) override;
  grpc::Status ListKillCriteria(grpc::ServerContext* context,
                                const v1::ListKillCriteriaRequest* request,
                                v1::ListKillCriteriaResponse* response) override;
  grpc::Status GetProvenance(grpc::ServerContext* context,
                             const v1::GetProvenanceRequest* request,
                             v1::ProvenanceResponse* response) override;
  grpc::Status RequestCheckpoint(grpc::ServerContext* context,
                                 const v1::RequestCheckpointRequest* request,
                                 v1::ActionResponse* response) override;
  grpc::Status GetSupervisorStatus(grpc::ServerContext* context,
                                   const v1::GetSupervisorStatusRequest* request,
                                   v1::SupervisorStatus* response) override;

 private:
  SupervisorHost* const host_;
  AccessControl* const access_;
  const std::function<v1::SupervisorStatus()> status_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_OPERATOR_SERVICE_H_
