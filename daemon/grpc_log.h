#ifndef TRAINSUP_DAEMON_GRPC_LOG_H_
#define TRAINSUP_DAEMON_GRPC_LOG_H_

#include <cstdint>

namespace trainsup {

// Routes gRPC's own log lines (gpr_log, errors only unless GRPC_VERBOSITY
// says otherwise) into trainsup's log, prefixed "grpc:", and counts the ones
// that say gRPC stopped accepting connections: gRPC 1.51 logs
// "Failed accept4: Too many open files" (or any accept4 error but EINTR,
// EAGAIN and ECONNABORTED) and never polls that listening socket again.
// Idempotent; call before starting gRPC.
void InstallGrpcLogHook();

// How many "Failed accept4" lines gRPC has logged since the hook was
// installed. Lock-free; the hook itself never blocks.
uint64_t GrpcAcceptFailures();

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_GRPC_LOG_H_
