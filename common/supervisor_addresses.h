#ifndef TRAINSUP_COMMON_SUPERVISOR_ADDRESSES_H_
#define TRAINSUP_COMMON_SUPERVISOR_ADDRESSES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// The trailing metadata key of a trainsupd's refusal as a standby (or as a
// leader that stopped acting), UNAVAILABLE: the leader's gRPC address,
// HOST:PORT, or empty when it does not know one (docs/ha.md).
inline constexpr char kLeaderMetadataKey[] = "trainsup-leader";

// Whether HOST:PORT's host is one a server binds to but no client can dial
// (0.0.0.0, [::], empty).
bool IsWildcardHost(absl::string_view address);

// The trainsupd instances a client was given (`--supervisor a,b`) and the
// one it talks to now. After a call that did not reach the leader, Next()
// picks the address to try next: the leader a standby named, else the next
// one of the list, round and round. Pure; not thread-safe.
class SupervisorAddresses {
 public:
  // "HOST:PORT[,HOST:PORT...]"; blanks around the commas are dropped.
  // InvalidArgument for an empty list or an address that is not HOST:PORT.
  static absl::StatusOr<SupervisorAddresses> Parse(absl::string_view list);

  // The address to call now: the first of the list at the start.
  const std::string& current() const { return current_; }
  const std::vector<std::string>& list() const { return list_; }
  // The list as given, "a,b".
  std::string Joined() const;

  // The call to current() failed without reaching the leader (unreachable,
  // or a standby's refusal naming `leader`, "" when none was named). Moves
  // to `leader` when it is usable (HOST:PORT, not a wildcard host like
  // 0.0.0.0, and not the address that just failed), else to the list's next
  // address after the last one tried from the list. Returns current().
  const std::string& Next(absl::string_view leader);

 private:
  explicit SupervisorAddresses(std::vector<std::string> list);

  std::vector<std::string> list_;
  size_t position_ = 0;  // list_[position_]: the list's address tried last
  std::string current_;
};

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_SUPERVISOR_ADDRESSES_H_
