#ifndef TRAINSUP_AGENT_PLAN_FILE_H_
#define TRAINSUP_AGENT_PLAN_FILE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// The checkpoint plans the agent holds and the file its ranks read them from
// (TRAINSUP_PLAN_FILE: CheckpointPlans as JSON with proto field names, every
// plan received, in order). The file is replaced whole (written aside, then
// renamed), so that a rank never reads half of it. Thread-safe: the event
// loop adds plans, the link's thread reads them for its hello.
class PlanFile {
 public:
  // `path`: the file to write; its directory must exist.
  explicit PlanFile(std::string path);
  PlanFile(const PlanFile&) = delete;
  PlanFile& operator=(const PlanFile&) = delete;

  const std::string& path() const { return path_; }

  // Keeps `plan` (a plan id already held is ignored: a resend after a
  // reconnect) and rewrites the file. On an error the plan is still held,
  // and the next Add or Rewrite writes it.
  absl::Status Add(const v1::CheckpointPlan& plan);
  // Writes the file again if the last write failed.
  absl::Status Rewrite();

  // Every plan held, in the order received.
  v1::CheckpointPlans plans() const;
  // The highest plan id written to the file with every plan received before
  // it (what NodeReport.plans_held_through says); 0: none.
  uint64_t held_through() const;

 private:
  absl::Status WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  v1::CheckpointPlans plans_ ABSL_GUARDED_BY(mu_);
  bool written_ ABSL_GUARDED_BY(mu_) = true;  // the file holds every plan in plans_
  uint64_t held_through_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_PLAN_FILE_H_
