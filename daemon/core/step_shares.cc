#include "daemon/core/step_shares.h"

#include <algorithm>

namespace trainsup {
namespace {

double Share(float part, float whole) {
  if (whole <= 0) return 0;
  return std::clamp(static_cast<double>(part) / whole, 0.0, 1.0);
}

}  // namespace

void StepShares::Add(double step_s, double data_wait_s, std::optional<double> compute_s) {
  if (!(step_s > 0)) return;
  const double wait = std::clamp(data_wait_s, 0.0, step_s);
  step_ = kRecentDecay * step_ + static_cast<float>(step_s);
  wait_ = kRecentDecay * wait_ + static_cast<float>(wait);
  if (!compute_s) return;
  const double outside = std::max(0.0, step_s - std::max(0.0, *compute_s) - wait);
  comm_step_ = kRecentDecay * comm_step_ + static_cast<float>(step_s);
  comm_ = kRecentDecay * comm_ + static_cast<float>(outside);
  long_comm_step_ = kLongDecay * long_comm_step_ + static_cast<float>(step_s);
  long_comm_ = kLongDecay * long_comm_ + static_cast<float>(outside);
}

double StepShares::data_wait_share() const { return Share(wait_, step_); }

std::optional<double> StepShares::comm_share() const {
  if (comm_step_ <= 0) return std::nullopt;
  return Share(long_comm_, long_comm_step_);
}

std::optional<double> StepShares::comm_share_trend() const {
  if (comm_step_ <= 0) return std::nullopt;
  return Share(comm_, comm_step_) - Share(long_comm_, long_comm_step_);
}

}  // namespace trainsup
