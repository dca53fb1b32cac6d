#include "daemon/core/gpu_health.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "common/gpu_clock_reasons.h"

namespace trainsup {
namespace {

const GpuHealthState* Previous(const std::vector<GpuHealthState>& kept,
                               const GpuHealthSampleInfo& gpu) {
  for (const GpuHealthState& k : kept) {
    if (!gpu.uuid.empty() ? k.uuid == gpu.uuid : k.index == gpu.index) return &k;
  }
  return nullptr;
}

void NoteRise(int32_t index, const char* counter, double before, std::optional<double> now,
              std::vector<GpuErrorRise>* rises) {
  if (now && *now > before) rises->push_back({index, counter, before, *now});
}

}  // namespace

std::vector<GpuErrorRise> NoteGpuHealth(absl::Time now, const GpuHealthInfo& report,
                                        std::vector<GpuHealthState>* kept) {
  std::vector<GpuErrorRise> rises;
  std::vector<GpuHealthState> next;
  next.reserve(report.gpus.size());
  for (const GpuHealthSampleInfo& gpu : report.gpus) {
    const GpuHealthState* before = Previous(*kept, gpu);
    GpuHealthState s;
    s.index = gpu.index;
    s.uuid = gpu.uuid;
    s.slowing = gpu.clock_event_reasons.value_or(0) & kClockSlowingReasons;
    if (s.slowing != 0) {
      s.slowed_since = before != nullptr && before->slowing != 0 ? before->slowed_since : now;
    }
    s.temperature_c = gpu.temperature_c;
    s.ecc_uncorrectable = gpu.ecc_uncorrectable.value_or(0);
    s.uncorrectable_remapped_rows = gpu.uncorrectable_remapped_rows.value_or(0);
    s.row_remap_pending = gpu.row_remap_pending.value_or(false);
    s.ranks = gpu.ranks;
    if (before != nullptr) {
      NoteRise(gpu.index, "uncorrectable ECC errors", before->ecc_uncorrectable,
               gpu.ecc_uncorrectable, &rises);
      NoteRise(gpu.index, "uncorrectable remapped rows", before->uncorrectable_remapped_rows,
               gpu.uncorrectable_remapped_rows, &rises);
    }
    next.push_back(std::move(s));
  }
  *kept = std::move(next);
  return rises;
}

const GpuHealthState* SlowedGpuOf(const std::vector<GpuHealthState>& gpus, uint32_t rank) {
  for (const GpuHealthState& g : gpus) {
    if (g.slowing != 0 && std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end()) {
      return &g;
    }
  }
  return nullptr;
}

std::string SlowedGpuNote(const GpuHealthState& gpu, absl::Time now) {
  return absl::StrCat("GPU ", gpu.index, " in ", SlowingReasonsText(gpu.slowing), " since ",
                      absl::FormatTime("%H:%M:%S UTC", gpu.slowed_since, absl::UTCTimeZone()),
                      " (", TenthsOfSeconds(now - gpu.slowed_since), ")");
}

std::string GpuErrorRiseText(const GpuErrorRise& rise) {
  return absl::StrFormat("%s %g -> %g on GPU %d", rise.counter, rise.before, rise.now, rise.index);
}

}  // namespace trainsup
