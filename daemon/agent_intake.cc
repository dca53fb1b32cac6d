#include "daemon/agent_intake.h"

#include "common/grpc_util.h"
#include "common/log.h"
#include "daemon/proto_convert.h"

namespace trainsup {

grpc::Status ApplyAgentMessage(SupervisorHost& host, const v1::AgentMessage& message,
                               const std::shared_ptr<AgentChannel>& channel,
                               absl::string_view peer, SessionId* session,
                               NodeReportInfo* scratch) {
  if (message.has_hello()) {
    if (*session != 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hello sent twice on one stream");
    }
    absl::StatusOr<Supervisor::HelloResult> hello = host.Hello(FromProto(message.hello()), channel);
    if (!hello.ok()) return ToGrpcStatus(hello.status());
    *session = hello->session;
    TRAINSUP_LOG_INFO("agent connected: node=%s job=%s generation=%d (%s)", message.hello().node(),
                      message.hello().job(), message.hello().generation(), peer);
    return grpc::Status::OK;  // the host sent the welcome
  }
  if (message.has_report()) {
    if (*session == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "report before hello");
    }
    FromProto(message.report(), scratch);
    return ToGrpcStatus(host.Report(*session, *scratch));
  }
  if (message.has_stacks()) {
    if (*session == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "stacks before hello");
    }
    return ToGrpcStatus(host.Stacks(*session, FromProto(message.stacks())));
  }
  if (message.has_gpu_error()) {
    if (*session == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gpu error before hello");
    }
    return ToGrpcStatus(host.GpuError(*session, FromProto(message.gpu_error())));
  }
  if (message.has_gpu_health()) {
    if (*session == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gpu health before hello");
    }
    return ToGrpcStatus(host.GpuHealth(*session, FromProto(message.gpu_health())));
  }
  if (message.has_provenance()) {
    if (*session == 0) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "provenance before hello");
    }
    return ToGrpcStatus(host.Provenance(*session, message.provenance()));
  }
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty agent message");
}

}  // namespace trainsup
