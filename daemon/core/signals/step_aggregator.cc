#include "daemon/core/signals/step_aggregator.h"

#include <algorithm>
#include <cmath>

namespace trainsup {

void StepAggregator::Clear() {
  if (slots_ != nullptr) {
    for (Slot& slot : *slots_) {
      slot.open = false;
      slot.groups.clear();
    }
  }
  lowest_open_ = highest_open_ = last_final_ = -1;
}

void StepAggregator::Add(absl::Time now, RankAt at, const Heartbeat& hb, double checkpoint_s,
                         uint32_t expected_ranks) {
  const int64_t step = hb.step;
  // Handed over already, or a step nobody sent while later ones are open (a
  // script that reports some steps only): left out.
  if (step <= last_final_ || (lowest_open_ >= 0 && step < lowest_open_)) {
    ++late_;
    return;
  }
  // The ring holds kSlots consecutive steps: the oldest goes first.
  while (lowest_open_ >= 0 && step >= lowest_open_ + static_cast<int64_t>(kSlots)) {
    FinalizeLowest();
  }
  if (slots_ == nullptr) {
    slots_ = std::make_unique<std::array<Slot, kSlots>>();
    ready_.reserve(kSlots);
  }
  Slot& slot = SlotOf(step);
  if (!slot.open) {
    slot.open = true;
    slot.complete = false;
    slot.count = 0;
    slot.s = StepSignals();
    slot.s.step = step;
    slot.s.time = now;
    slot.loss_sum = slot.step_time_sum = slot.data_wait_sum = 0;
    slot.loss_n = slot.step_time_n = slot.data_wait_n = 0;
    slot.groups.clear();  // keeps its memory while small
    if (lowest_open_ < 0) lowest_open_ = step;
    highest_open_ = std::max(highest_open_, step);
  }
  Accumulate(slot, at, hb, checkpoint_s);
  if (hb.replica_digest) Tally(slot, at, *hb.replica_digest, hb.replica_group);
  if (++slot.count >= expected_ranks) slot.complete = true;
  FinalizeComplete();
}

void StepAggregator::Accumulate(Slot& slot, RankAt at, const Heartbeat& hb, double checkpoint_s) {
  StepSignals& s = slot.s;
  ++s.ranks;
  if (hb.loss) {
    if (std::isfinite(*hb.loss)) {
      slot.loss_sum += *hb.loss;
      ++slot.loss_n;
    } else {
      ++s.loss_nonfinite;
    }
  }
  if (hb.learning_rate && !s.learning_rate) s.learning_rate = hb.learning_rate;
  if (hb.grad_norm) {
    if (std::isfinite(*hb.grad_norm)) {
      if (!s.grad_norm || *hb.grad_norm > *s.grad_norm) {
        s.grad_norm = hb.grad_norm;
        s.grad_norm_at = at;
      }
    } else if (s.grad_nonfinite++ == 0) {
      s.grad_nonfinite_at = at;
    }
  }
  // A duration of 0 is "not measured" (a rank's first step); one that held
  // a blocking checkpoint is not the training's pace.
  if (hb.step_duration_s > 0 && checkpoint_s <= 0) {
    slot.step_time_sum += hb.step_duration_s;
    ++slot.step_time_n;
    slot.data_wait_sum += hb.data_wait_s;
    ++slot.data_wait_n;
  }
  if (hb.samples) s.samples += *hb.samples;
  if (hb.tokens) s.tokens += *hb.tokens;
  if (hb.device_memory_bytes) {
    const double bytes = static_cast<double>(*hb.device_memory_bytes);
    if (!s.device_memory_bytes || bytes > *s.device_memory_bytes) {
      s.device_memory_bytes = bytes;
      s.device_memory_at = at;
      s.device_capacity_bytes.reset();
      if (hb.device_memory_capacity_bytes) {
        s.device_capacity_bytes = static_cast<double>(*hb.device_memory_capacity_bytes);
      }
    }
  }
  if (hb.host_rss_bytes) {
    const double bytes = static_cast<double>(*hb.host_rss_bytes);
    if (!s.host_rss_bytes || bytes > *s.host_rss_bytes) {
      s.host_rss_bytes = bytes;
      s.host_rss_at = at;
    }
  }
}

void StepAggregator::Tally(Slot& slot, RankAt at, uint64_t value, uint32_t group) {
  GroupTally& tally = slot.groups[group];
  ++tally.total;
  for (size_t i = 0; i < tally.used; ++i) {
    Digest& d = tally.digests[i];
    if (d.value != value) continue;
    if (d.count < kNamedPerDigest) d.first[d.count] = at;
    ++d.count;
    return;
  }
  if (tally.used == kDigestsPerGroup) {
    ++tally.others;
    return;
  }
  Digest& d = tally.digests[tally.used++];
  d.value = value;
  d.count = 1;
  d.first[0] = at;
}

void StepAggregator::Expire(absl::Time now, absl::Duration age) {
  while (lowest_open_ >= 0 && SlotOf(lowest_open_).s.time < now - age) FinalizeLowest();
  FinalizeComplete();
}

void StepAggregator::FinalizeComplete() {
  while (lowest_open_ >= 0 && SlotOf(lowest_open_).complete) FinalizeLowest();
}

void StepAggregator::FinalizeLowest() {
  Finalize(SlotOf(lowest_open_));
  AdvanceLowest();
}

void StepAggregator::AdvanceLowest() {
  const int64_t from = lowest_open_;
  lowest_open_ = -1;
  for (int64_t step = from + 1; step <= highest_open_; ++step) {
    const Slot& slot = SlotOf(step);
    if (slot.open && slot.s.step == step) {
      lowest_open_ = step;
      return;
    }
  }
  highest_open_ = -1;
}

void StepAggregator::Finalize(Slot& slot) {
  StepSignals& s = slot.s;
  if (slot.loss_n > 0) s.loss = slot.loss_sum / slot.loss_n;
  if (slot.step_time_n > 0) {
    s.step_time_s = slot.step_time_sum / slot.step_time_n;
    s.data_wait_s = slot.data_wait_sum / slot.data_wait_n;
  }
  for (const auto& [group, tally] : slot.groups) Judge(s.step, group, tally);
  slot.open = false;
  last_final_ = s.step;
  ready_.push_back(s);
}

void StepAggregator::Judge(int64_t step, uint32_t group, const GroupTally& tally) {
  if (tally.used <= 1 && tally.others == 0) return;  // every rank agreed
  size_t top = 0;
  for (size_t i = 1; i < tally.used; ++i) {
    if (tally.digests[i].count > tally.digests[top].count) top = i;
  }
  ReplicaDisagreement d;
  d.step = step;
  d.group = group;
  d.group_ranks = tally.total;
  d.majority = tally.digests[top].count;
  d.no_majority = d.majority < 2 || 2 * d.majority <= tally.total;
  if (!d.no_majority) {
    d.disagreeing = tally.total - d.majority;
    for (size_t i = 0; i < tally.used; ++i) {
      if (i == top) continue;
      const Digest& other = tally.digests[i];
      const size_t named = std::min<size_t>(other.count, kNamedPerDigest);
      d.named.insert(d.named.end(), other.first.begin(), other.first.begin() + named);
    }
  }
  disagreements_.push_back(std::move(d));
}

}  // namespace trainsup
