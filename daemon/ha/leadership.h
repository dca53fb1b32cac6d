#ifndef TRAINSUP_DAEMON_HA_LEADERSHIP_H_
#define TRAINSUP_DAEMON_HA_LEADERSHIP_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace trainsup {

// Whether an instance may act as the leader, from what its election client
// learned, at `now`. Pure: the election adapter (etcd_election.h) feeds it
// facts with their times and asks it. Thread-compatible.
//
// The rule: an instance acts only while it won the election, has not lost
// it since, and its lease cannot have expired on etcd's clock. etcd expires
// a lease no sooner than its TTL after it received the keepalive that
// renewed it, which is after the instance sent that keepalive: so the lease
// is surely alive until `sent + ttl`, and the instance stops acting a
// margin before that (for the two clocks' rates). An instance that stopped
// so (suspended) acts again only after a renewal *and* a check that its key
// still leads the election: when etcd's quorum returns both instances'
// leases may have survived, and only the election says who leads.
class Leadership {
 public:
  enum class Role {
    kStandby,    // not elected (campaigning, or between leases)
    kLeader,     // elected, lease surely alive, leadership verified
    kSuspended,  // elected, but the lease may be gone: not acting until verified
  };

  // `margin`: stop acting this long before the lease could expire.
  // REQUIRES: margin >= 0.
  explicit Leadership(absl::Duration margin) : margin_(margin) {}

  // A new lease was granted: a keepalive (or the grant) sent at `sent`
  // answered with `ttl` left. Forgets any election won on an older lease.
  void NewLease(absl::Time sent, absl::Duration ttl);
  // A keepalive sent at `sent` answered that the lease has `ttl` left.
  // Answers older than the newest renewal are ignored.
  void Renewed(absl::Time sent, absl::Duration ttl);
  // The campaign on the current lease won: the leader key's revision is
  // `epoch` (its create revision: the fencing token).
  void Elected(absl::Time now, int64_t epoch);
  // The answer to "does my key still lead?", asked at `asked` after a
  // suspension. False: the election is lost (as Lost()).
  void Verified(absl::Time asked, bool still_leader);
  // The lease is gone (expired, revoked) or another key leads: back to
  // standby, until the next lease's campaign wins.
  void Lost();

  // The role at `now`; a leader whose lease may have lapsed by `now` becomes
  // suspended (and stays so until Verified).
  Role Update(absl::Time now);
  // True when a suspended leader's lease was renewed after it was suspended:
  // time to ask the election whether it still leads.
  bool NeedsVerification() const;

  // The lease is surely alive until then (InfinitePast without a lease).
  absl::Time lease_valid_until() const { return valid_until_; }
  // The leader's epoch while elected (leader or suspended), else 0.
  int64_t epoch() const { return elected_ ? epoch_ : 0; }
  Role role() const { return role_; }

 private:
  const absl::Duration margin_;
  absl::Time newest_renewal_sent_ = absl::InfinitePast();
  absl::Time valid_until_ = absl::InfinitePast();
  bool elected_ = false;
  int64_t epoch_ = 0;
  Role role_ = Role::kStandby;
  absl::Time suspended_at_ = absl::InfinitePast();
};

// "standby", "leader", "suspended".
const char* RoleName(Leadership::Role role);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_LEADERSHIP_H_
