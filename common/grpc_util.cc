#include "common/grpc_util.h"

#include <string>

#include "common/supervisor_addresses.h"

namespace trainsup {

// absl::StatusCode and grpc::StatusCode share their numeric values (both follow
// google.rpc.Code), so a cast is exact.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::optional<std::string> LeaderNamedIn(const grpc::ClientContext& context) {
  const auto& trailing = context.GetServerTrailingMetadata();
  auto it = trailing.find(kLeaderMetadataKey);
  if (it == trailing.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

}  // namespace trainsup
