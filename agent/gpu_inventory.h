#ifndef TRAINSUP_AGENT_GPU_INVENTORY_H_
#define TRAINSUP_AGENT_GPU_INVENTORY_H_

// Which GPU an Xid names, and which of the node's ranks use it (docs/gpu.md).
// Pure: the agent runs nvidia-smi and hands its output here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/xid_line.h"

namespace trainsup {

// What the agent asks nvidia-smi (with its header: columns are found by name).
constexpr absl::string_view kGpuQueryArgs =
    "--query-gpu=index,pci.bus_id,uuid,serial --format=csv";

struct GpuInfo {
  int index = -1;                 // nvidia-smi's (PCI bus order); -1: not known
  std::optional<PciAddress> pci;  // none: not known
  std::string uuid;               // "GPU-..."; "" when not known
  std::string serial;
};

// nvidia-smi's CSV: a header line (`index, pci.bus_id, uuid, serial` in any
// order; `pci.bus` alone, as older queries ask, is the bus on domain 0,
// device 0), then one GPU a line. InvalidArgument without a header naming
// `index`; a row that does not parse is left out.
absl::StatusOr<std::vector<GpuInfo>> ParseGpuQuery(absl::string_view csv);

// The GPUs of a node, from nvidia-smi and from what the driver itself said
// ("NVRM: GPU at PCI:...: GPU-..." before an Xid).
class GpuInventory {
 public:
  GpuInventory() = default;
  explicit GpuInventory(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}

  // The driver named the UUID of the GPU at `pci`.
  void NoteUuid(const PciAddress& pci, const std::string& uuid);
  // The GPU at `pci`: what is known of it (index -1 when nvidia-smi did not
  // list it).
  GpuInfo At(const PciAddress& pci) const;
  const std::vector<GpuInfo>& gpus() const { return gpus_; }

 private:
  std::vector<GpuInfo> gpus_;
};

// The local ranks that use `gpu`. torchrun gives local rank i the i-th
// device CUDA shows it: the i-th entry of CUDA_VISIBLE_DEVICES (an index or
// a UUID, or a unique prefix of one) when the agent's environment sets it
// (`visible` set), else GPU i. Assumes CUDA counts GPUs in nvidia-smi's
// order (PCI bus order: true of identical GPUs, and always under
// CUDA_DEVICE_ORDER=PCI_BUS_ID). None for a GPU whose index is unknown.
std::vector<uint32_t> LocalRanksOnGpu(const GpuInfo& gpu, const std::optional<std::string>& visible,
                                      uint32_t local_ranks);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_GPU_INVENTORY_H_
