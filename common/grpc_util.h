#ifndef TRAINSUP_COMMON_GRPC_UTIL_H_
#define TRAINSUP_COMMON_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace trainsup {

// The one place where core errors become wire errors and back.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_GRPC_UTIL_H_
