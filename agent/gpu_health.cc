#include "agent/gpu_health.h"

#include <tuple>

#include "absl/strings/match.h"

namespace trainsup {
namespace {

bool SameGpu(const GpuHealth& a, const GpuHealth& b) {
  if (!a.uuid.empty() && !b.uuid.empty()) return a.uuid == b.uuid;
  if (!a.pci_bus_id.empty() && !b.pci_bus_id.empty()) {
    return absl::EqualsIgnoreCase(a.pci_bus_id, b.pci_bus_id);  // "3B" or "3b"
  }
  return a.index >= 0 && a.index == b.index;
}

template <typename T>
void Overlay(std::optional<T>& base, const std::optional<T>& over) {
  if (over.has_value()) base = over;
}

void Overlay(GpuHealth& base, const GpuHealth& over) {
  if (base.index < 0) base.index = over.index;
  if (base.uuid.empty()) base.uuid = over.uuid;
  if (base.pci_bus_id.empty()) base.pci_bus_id = over.pci_bus_id;
  Overlay(base.clock_event_reasons, over.clock_event_reasons);
  Overlay(base.temperature_c, over.temperature_c);
  Overlay(base.pcie_replays, over.pcie_replays);
  Overlay(base.ecc_uncorrectable, over.ecc_uncorrectable);
  Overlay(base.uncorrectable_remapped_rows, over.uncorrectable_remapped_rows);
  Overlay(base.row_remap_failure, over.row_remap_failure);
  Overlay(base.last_xid, over.last_xid);
  Overlay(base.row_remap_pending, over.row_remap_pending);
}

// What HealthChanged compares of one GPU.
auto Acted(const GpuHealth& g) {
  const std::optional<uint64_t> slowing =
      g.clock_event_reasons ? std::optional<uint64_t>(*g.clock_event_reasons & kClockSlowingReasons)
                            : std::nullopt;
  return std::make_tuple(g.index, g.uuid, slowing, g.ecc_uncorrectable,
                         g.uncorrectable_remapped_rows, g.row_remap_failure, g.row_remap_pending,
                         g.last_xid);
}

}  // namespace

std::vector<GpuHealth> MergeGpuHealth(std::vector<GpuHealth> smi,
                                      const std::vector<GpuHealth>& dcgm) {
  for (const GpuHealth& d : dcgm) {
    bool matched = false;
    for (GpuHealth& s : smi) {
      if (SameGpu(s, d)) {
        Overlay(s, d);
        matched = true;
        break;
      }
    }
    if (!matched) smi.push_back(d);
  }
  return smi;
}

bool HealthChanged(const std::vector<GpuHealth>& before, const std::vector<GpuHealth>& now) {
  if (before.size() != now.size()) return true;
  for (size_t i = 0; i < now.size(); ++i) {
    if (Acted(before[i]) != Acted(now[i])) return true;
  }
  return false;
}

}  // namespace trainsup
