#include "common/supervisor_addresses.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/options.h"

namespace trainsup {

bool IsWildcardHost(absl::string_view address) {
  const size_t colon = address.rfind(':');
  const absl::string_view host = address.substr(0, colon);
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
}

absl::StatusOr<SupervisorAddresses> SupervisorAddresses::Parse(absl::string_view list) {
  std::vector<std::string> addresses;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (absl::Status s = CheckHostPort(part); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("supervisor address ", part, ": ",
                                                     s.message()));
    }
    addresses.emplace_back(part);
  }
  if (addresses.empty()) return absl::InvalidArgumentError("no supervisor address");
  return SupervisorAddresses(std::move(addresses));
}

SupervisorAddresses::SupervisorAddresses(std::vector<std::string> list)
    : list_(std::move(list)), current_(list_.front()) {}

std::string SupervisorAddresses::Joined() const { return absl::StrJoin(list_, ","); }

const std::string& SupervisorAddresses::Next(absl::string_view leader) {
  if (!leader.empty() && leader != current_ && CheckHostPort(leader).ok() &&
      !IsWildcardHost(leader)) {
    current_ = std::string(leader);
    // A leader of the list: the list goes on after it when it fails too.
    auto it = std::find(list_.begin(), list_.end(), current_);
    if (it != list_.end()) position_ = static_cast<size_t>(it - list_.begin());
    return current_;
  }
  position_ = (position_ + 1) % list_.size();
  current_ = list_[position_];
  return current_;
}

}  // namespace trainsup
