#ifndef TRAINSUP_COMMON_GRPC_UTIL_H_
#define TRAINSUP_COMMON_GRPC_UTIL_H_

#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace trainsup {

// The one place where core errors become wire errors and back.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// After a finished call: when a trainsupd refused it as a standby (or as a
// leader that stopped acting), the leader's address it named in the trailing
// metadata ("" when it knew none); nullopt when no trainsupd said so (it was
// not reached, or refused for another reason).
std::optional<std::string> LeaderNamedIn(const grpc::ClientContext& context);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_GRPC_UTIL_H_
