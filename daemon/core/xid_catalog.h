#ifndef TRAINSUP_DAEMON_CORE_XID_CATALOG_H_
#define TRAINSUP_DAEMON_CORE_XID_CATALOG_H_

// What an Xid means, from NVIDIA's Xid catalog (docs/gpu.md): each code's
// mnemonic and its resolution bucket (the immediate action: RESTART_APP,
// RESET_GPU, RESTART_BM, IGNORE, ...), and what trainsupd does about it.
// Pure.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// What trainsupd does on an Xid.
enum class XidAction {
  kReport = 0,  // an event, nothing else (IGNORE, CONTACT_SUPPORT, unknown codes)
  kWorkload,    // the application's error: the crash that follows is the workload's,
                // never charged to the node (RESTART_APP)
  kDrain,       // the node finishes the job, then is quarantined (a reset at the
                // next opportunity: a pending row remap, Xid 154's "Drain and Reset")
  kLeave,       // the GPU or the machine must be reset: the node leaves the job
                // at once, quarantined (RESET_GPU, RESTART_BM, Xid 48, 74)
};
constexpr int kXidActionCount = 4;

// "report", "workload", "drain", "leave".
absl::string_view XidActionName(XidAction action);
std::optional<XidAction> ParseXidAction(absl::string_view name);

struct XidMeaning {
  uint32_t code = 0;
  absl::string_view mnemonic;  // the catalog's; "" for a code it does not have
  absl::string_view bucket;    // the catalog's immediate action; "" when none
  XidAction action = XidAction::kReport;
  // Why the action (the bucket, or the override that chose it).
  std::string why;
};

// The catalog, with the operator's overrides (--xid-action CODE=ACTION).
class XidCatalog {
 public:
  XidCatalog() = default;
  // Parses "CODE=ACTION" entries; InvalidArgument naming the bad one.
  static absl::StatusOr<XidCatalog> WithOverrides(const std::vector<std::string>& entries);

  // What `code` means; `message` is the driver's text, which decides for
  // the codes whose action the text names (Xid 154's recovery action, the
  // NVLink5 Xids 144-150's Fatal / Nonfatal).
  XidMeaning Meaning(uint32_t code, absl::string_view message) const;

 private:
  std::map<uint32_t, XidAction> overrides_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_XID_CATALOG_H_
