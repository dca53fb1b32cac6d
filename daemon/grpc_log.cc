#include "daemon/grpc_log.h"

#include <grpc/support/log.h>

#include <atomic>
#include <cstring>

#include "absl/strings/match.h"
#include "common/log.h"

namespace trainsup {
namespace {

std::atomic<uint64_t> accept_failures{0};

LogLevel LevelOf(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG:
      return LogLevel::kDebug;
    case GPR_LOG_SEVERITY_INFO:
      return LogLevel::kInfo;
    case GPR_LOG_SEVERITY_ERROR:
      return LogLevel::kError;
  }
  return LogLevel::kError;
}

// Called on gRPC's threads, possibly under its locks: counts and writes one
// line, nothing more (the listener is rebuilt elsewhere).
void OnGrpcLog(gpr_log_func_args* args) {
  const char* message = args->message != nullptr ? args->message : "";
  if (absl::StartsWith(message, "Failed accept4")) accept_failures.fetch_add(1);
  const char* file = args->file != nullptr ? args->file : "?";
  const char* slash = std::strrchr(file, '/');
  Log(LevelOf(args->severity), "grpc: %s (%s:%d)", message, slash != nullptr ? slash + 1 : file,
      args->line);
}

}  // namespace

void InstallGrpcLogHook() { gpr_set_log_function(&OnGrpcLog); }

uint64_t GrpcAcceptFailures() { return accept_failures.load(); }

}  // namespace trainsup
