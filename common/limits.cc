#include "common/limits.h"

#include "absl/strings/ascii.h"
#include "common/format.h"

namespace trainsup {

bool IsValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || name.front() == '-') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool IsValidReason(absl::string_view reason) {
  if (reason.empty() || reason.size() > kMaxReasonLength || !IsValidUtf8(reason)) return false;
  for (char c : reason) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace trainsup
