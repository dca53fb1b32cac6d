#include "daemon/core/decisions.h"

#include <utility>

#include "daemon/core/job_entry.h"

namespace trainsup {

const Event& Decisions::Emit(JobEntry* job, Event event) {
  if (job != nullptr) job->CountEvent(event.kind);
  const Event& stored = events_.Append(std::move(event));
  output_.events.push_back(stored);
  output_.journal.events.push_back(stored);
  return stored;
}

void Decisions::Fence(FenceRequest fence) {
  fence.id = next_fence_id_++;
  pending_fences_[fence.node] = fence.id;
  output_.journal.fences.push_back({fence.node, fence.reason, fence.decided, true, fence.action});
  output_.fences.push_back(std::move(fence));
}

void Decisions::FenceSucceeded(absl::Time now, const FenceRequest& request) {
  auto it = pending_fences_.find(request.node);
  if (it == pending_fences_.end() || it->second != request.id) return;  // replaced or dropped
  DropFence(now, request.node);
}

void Decisions::DropFence(absl::Time now, const std::string& node) {
  pending_fences_.erase(node);
  output_.journal.fences.push_back({node, "", now, false});
}

SupervisorOutput Decisions::Take() {
  SupervisorOutput out = std::move(output_);
  output_ = SupervisorOutput();
  return out;
}

}  // namespace trainsup
