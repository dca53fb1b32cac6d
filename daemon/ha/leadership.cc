#include "daemon/ha/leadership.h"

namespace trainsup {

void Leadership::NewLease(absl::Time sent, absl::Duration ttl) {
  elected_ = false;
  epoch_ = 0;
  role_ = Role::kStandby;
  newest_renewal_sent_ = sent;
  valid_until_ = sent + ttl - margin_;
}

void Leadership::Renewed(absl::Time sent, absl::Duration ttl) {
  if (sent < newest_renewal_sent_) return;
  newest_renewal_sent_ = sent;
  valid_until_ = sent + ttl - margin_;
}

void Leadership::Elected(absl::Time now, int64_t epoch) {
  elected_ = true;
  epoch_ = epoch;
  role_ = Role::kLeader;
  Update(now);
}

void Leadership::Verified(absl::Time asked, bool still_leader) {
  if (!elected_) return;
  if (!still_leader) {
    Lost();
    return;
  }
  if (role_ == Role::kSuspended && asked >= suspended_at_) role_ = Role::kLeader;
  Update(asked);
}

void Leadership::Lost() {
  elected_ = false;
  epoch_ = 0;
  role_ = Role::kStandby;
}

Leadership::Role Leadership::Update(absl::Time now) {
  if (role_ == Role::kLeader && now >= valid_until_) {
    role_ = Role::kSuspended;
    suspended_at_ = now;
  }
  return role_;
}

bool Leadership::NeedsVerification() const {
  return role_ == Role::kSuspended && newest_renewal_sent_ >= suspended_at_;
}

const char* RoleName(Leadership::Role role) {
  switch (role) {
    case Leadership::Role::kStandby:
      return "standby";
    case Leadership::Role::kLeader:
      return "leader";
    case Leadership::Role::kSuspended:
      return "suspended";
  }
  return "standby";
}

}  // namespace trainsup
