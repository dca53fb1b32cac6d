#include "daemon/core/heartbeat.h"

namespace trainsup {

absl::string_view LauncherStateName(LauncherState state) {
  switch (state) {
    case LauncherState::kWaiting:
      return "waiting";
    case LauncherState::kRunning:
      return "running";
    case LauncherState::kStopping:
      return "stopping";
    case LauncherState::kExited:
      return "exited";
    case LauncherState::kUnspecified:
      break;
  }
  return "unknown";
}

}  // namespace trainsup
