#include "daemon/core/gpu_errors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainsup {
namespace {

// "GPU 3 (GPU-5d49..., 0000:1a:00; ranks 6, 7)", or what of it is known.
std::string GpuText(const GpuErrorInfo& e) {
  std::string text = e.gpu_index >= 0 ? absl::StrCat("GPU ", e.gpu_index) : "a GPU";
  std::vector<std::string> known;
  if (!e.gpu_uuid.empty()) known.push_back(e.gpu_uuid);
  if (!e.pci_bus_id.empty()) known.push_back(e.pci_bus_id);
  if (!known.empty()) absl::StrAppend(&text, " (", absl::StrJoin(known, ", "), ")");
  if (!e.ranks.empty()) {
    absl::StrAppend(&text, e.ranks.size() == 1 ? ", rank " : ", ranks ",
                    absl::StrJoin(e.ranks, ", "));
  } else if (!e.local_ranks.empty()) {
    absl::StrAppend(&text, e.local_ranks.size() == 1 ? ", local rank " : ", local ranks ",
                    absl::StrJoin(e.local_ranks, ", "));
  }
  return text;
}

// "Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" ("Xid 4242" for a code
// the catalog does not have): how the event, the quarantine's reason and the
// node's record name it.
std::string XidName(const XidMeaning& m) {
  return absl::StrCat("Xid ", m.code, m.mnemonic.empty() ? "" : " ", m.mnemonic);
}

// The quarantine's reason: short, as a node's record shows it.
std::string QuarantineReason(const GpuErrorInfo& e, const XidMeaning& m) {
  return absl::StrCat(XidName(m), " on ", GpuText(e));
}

}  // namespace

Event GpuErrorEvent(absl::Time time, const EventJob& job, const std::string& node,
                    const GpuErrorInfo& error, const XidMeaning& meaning,
                    absl::string_view taken) {
  Event e;
  e.time = time;
  e.kind = EventKind::kGpuError;
  e.job = job.id;
  e.generation = job.generation;
  e.node = node;
  if (!error.ranks.empty()) e.rank = error.ranks.front();
  e.message = absl::StrCat(
      XidName(meaning), " on ", node, " ", GpuText(error), error.message.empty() ? "" : ": ", error.message,
      error.process.empty() ? "" : absl::StrCat(" [", error.process, "]"), " -> ",
      XidActionName(meaning.action), " (", meaning.why, "): ", taken);
  e.figures = {{"xid", static_cast<double>(error.xid)},
               {"action", static_cast<double>(meaning.action)}};
  if (error.gpu_index >= 0) e.figures.emplace_back("gpu_index", error.gpu_index);
  if (!error.ranks.empty()) e.figures.emplace_back("ranks", static_cast<double>(error.ranks.size()));
  return e;
}

std::string GpuErrorHandler::LeaveText(const std::string& node) const {
  if (quarantine_.IsQuarantined(node)) return absl::StrCat("node ", node, " is quarantined already");
  if (quarantine_.AtCap(agents_.size())) {
    return absl::StrCat("node ", node,
                        " should leave, but --quarantine-max-fraction refuses another quarantine");
  }
  return absl::StrCat("node ", node,
                      " leaves the job at this first occurrence: quarantined and fenced, the job "
                      "restarts without it");
}

void GpuErrorHandler::OnGpuError(absl::Time now, NodeIndex index, const GpuErrorInfo& error) {
  NodeRecord& node = agents_.mutable_node(index);
  JobEntry* job = jobs_.Find(node.job);
  const XidMeaning meaning = options_.xid_catalog.Meaning(error.xid, error.message);
  node.last_gpu_error = absl::StrCat(XidName(meaning), ": ", XidActionName(meaning.action));
  node.last_gpu_error_at = now;
  if (job != nullptr) {
    job->SyncGeneration();
    GenerationVerdicts& verdicts = job->verdicts();
    if (verdicts.gpu_errors.size() < GenerationVerdicts::kMaxGpuErrorsKept) {
      verdicts.gpu_errors.push_back({node.name, error.xid, meaning.action});
    }
  }
  std::string taken;
  switch (meaning.action) {
    case XidAction::kReport:
      taken = "reported only";
      break;
    case XidAction::kWorkload:
      taken = absl::StrCat("the application's error: a crash that follows is the workload's, ",
                           "not charged to ", node.name);
      break;
    case XidAction::kDrain:
      taken = absl::StrCat("node ", node.name,
                           " finishes its generation, then is quarantined (drained) for the "
                           "GPU's reset");
      break;
    case XidAction::kLeave:
      taken = LeaveText(node.name);
      break;
  }
  const bool act = !options_.observe_only && (meaning.action == XidAction::kLeave ||
                                              meaning.action == XidAction::kDrain);
  if (options_.observe_only && meaning.action != XidAction::kReport) {
    taken = absl::StrCat(taken, " (--observe-only: nothing done)");
  }
  decisions_.Emit(job, GpuErrorEvent(now, EventJobOf(job), node.name, error, meaning, taken));
  if (!act) return;
  const std::string reason = QuarantineReason(error, meaning);
  if (meaning.action == XidAction::kLeave) {
    failures_.QuarantineNow(now, index, reason, "gpu_error");
    drains_.erase(node.name);
  } else if (!quarantine_.IsQuarantined(node.name)) {
    drains_.emplace(node.name, reason);
  }
}

void GpuErrorHandler::OnGpuHealth(absl::Time now, NodeIndex index, const GpuHealthInfo& report) {
  NodeRecord& node = agents_.mutable_node(index);
  const std::vector<GpuErrorRise> rises = NoteGpuHealth(now, report, &node.gpu_health);
  if (rises.empty()) return;
  JobEntry* job = jobs_.Find(node.job);
  for (const GpuErrorRise& rise : rises) {
    node.last_gpu_error = GpuErrorRiseText(rise);
    node.last_gpu_error_at = now;
    if (job == nullptr) continue;
    Failure failure;
    failure.kind = "gpu_uncorrectable";
    failure.node = index;
    failure.charged = true;
    failure.failed_at = now;
    failure.message = node.last_gpu_error;
    failures_.OnNodeFailure(now, *job, failure);
  }
}

void GpuErrorHandler::SweepDrains(absl::Time now) {
  for (auto it = drains_.begin(); it != drains_.end();) {
    const NodeIndex index = agents_.Find(it->first);
    if (index == kNoNode) {  // forgotten: nothing to drain
      it = drains_.erase(it);
      continue;
    }
    const JobEntry* job = jobs_.Find(agents_.node(index).job);
    const bool in_use = job != nullptr && (job->lifecycle().state == JobState::kRunning ||
                                           job->lifecycle().state == JobState::kPending);
    if (in_use) {
      ++it;
      continue;
    }
    failures_.QuarantineNow(now, index, it->second, "gpu_error");
    it = drains_.erase(it);
  }
}

}  // namespace trainsup
