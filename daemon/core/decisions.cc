#include "daemon/core/decisions.h"

#include <utility>

#include "daemon/core/job_entry.h"

namespace trainsup {

const Event& Decisions::Emit(JobEntry* job, Event event) {
  if (job != nullptr) {
    event.job = job->id();
    event.generation = job->job().generation();
    job->CountEvent(event.kind);
  }
  const Event& stored = events_.Append(std::move(event));
  output_.events.push_back(stored);
  output_.journal.events.push_back(stored);
  return stored;
}

SupervisorOutput Decisions::Take() {
  SupervisorOutput out = std::move(output_);
  output_ = SupervisorOutput();
  return out;
}

}  // namespace trainsup
