#include "daemon/core/job_costs.h"

#include <algorithm>

namespace trainsup {

void JobCosts::AddCheckpoint(double blocking_s, double async_s) {
  if (blocking_s > 0) checkpoint_blocking_.Add(blocking_s);
  if (async_s > 0) checkpoint_async_.Add(async_s);
}

void JobCosts::AddRestart(double seconds) { restarts_.Add(seconds); }

CostFigure JobCosts::Checkpoint(absl::Duration prior) const {
  if (checkpoint_blocking_.empty()) return {absl::ToDoubleSeconds(prior), false};
  return {checkpoint_blocking_.Percentile(0.5), true};
}

CostFigure JobCosts::Restart(absl::Duration prior) const {
  if (restarts_.empty()) return {absl::ToDoubleSeconds(prior), false};
  return {restarts_.Percentile(0.5), true};
}

double JobCosts::AsyncWrite() const {
  return checkpoint_async_.empty() ? 0 : checkpoint_async_.Percentile(0.5);
}

JobCosts::Samples JobCosts::samples() const {
  return {checkpoint_blocking_.Samples(), checkpoint_async_.Samples(), restarts_.Samples()};
}

void JobCosts::RestoreSamples(const Samples& samples) {
  for (double s : samples.checkpoint_blocking) checkpoint_blocking_.Add(s);
  for (double s : samples.checkpoint_async) checkpoint_async_.Add(s);
  for (double s : samples.restarts) restarts_.Add(s);
}

void JobCosts::StartRunning(absl::Time now) {
  if (running_since_ == absl::InfinitePast()) running_since_ = now;
}

void JobCosts::StopRunning(absl::Time now) {
  exposure_seconds_ = ExposureSeconds(now);
  running_since_ = absl::InfinitePast();
}

double JobCosts::ExposureSeconds(absl::Time now) const {
  if (running_since_ == absl::InfinitePast()) return exposure_seconds_;
  return exposure_seconds_ + std::max(0.0, absl::ToDoubleSeconds(now - running_since_));
}

void JobCosts::RestoreExposure(double seconds, bool running, absl::Time now) {
  exposure_seconds_ = seconds;
  running_since_ = running ? now : absl::InfinitePast();
}

}  // namespace trainsup
