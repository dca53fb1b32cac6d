#include "agent/gpu_inventory.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

std::vector<absl::string_view> Cells(absl::string_view line) {
  std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
  for (absl::string_view& c : cells) c = absl::StripAsciiWhitespace(c);
  return cells;
}

// A column's position in the header; -1 when it has none.
int Column(const std::vector<absl::string_view>& header, absl::string_view name) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

absl::string_view Cell(const std::vector<absl::string_view>& row, int column) {
  return column >= 0 && static_cast<size_t>(column) < row.size() ? row[column] : "";
}

// `pci.bus` alone: "0x01".
std::optional<PciAddress> BusOnly(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "0x") && !absl::ConsumePrefix(&text, "0X")) return std::nullopt;
  return ParsePciAddress(absl::StrCat(text, ":00"));
}

// Whether one CUDA_VISIBLE_DEVICES entry names `gpu`: its index, or its
// UUID or a unique prefix of it ("GPU-5d49").
bool Names(absl::string_view entry, const GpuInfo& gpu) {
  int index = 0;
  if (absl::SimpleAtoi(entry, &index)) return index == gpu.index;
  return !gpu.uuid.empty() && entry.size() >= 5 && absl::StartsWith(gpu.uuid, entry);
}

}  // namespace

absl::StatusOr<std::vector<GpuInfo>> ParseGpuQuery(absl::string_view csv) {
  std::vector<absl::string_view> lines = absl::StrSplit(csv, '\n', absl::SkipWhitespace());
  if (lines.empty()) return absl::InvalidArgumentError("nvidia-smi printed nothing");
  const std::vector<absl::string_view> header = Cells(lines[0]);
  const int index = Column(header, "index");
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvidia-smi's first line is no header naming index: ", lines[0]));
  }
  const int bus_id = Column(header, "pci.bus_id");
  const int bus = Column(header, "pci.bus");
  const int uuid = Column(header, "uuid");
  const int serial = Column(header, "serial");
  std::vector<GpuInfo> gpus;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<absl::string_view> row = Cells(lines[i]);
    GpuInfo gpu;
    if (!absl::SimpleAtoi(Cell(row, index), &gpu.index) || gpu.index < 0) continue;
    gpu.pci = bus_id >= 0 ? ParsePciAddress(Cell(row, bus_id)) : BusOnly(Cell(row, bus));
    gpu.uuid = std::string(Cell(row, uuid));
    gpu.serial = std::string(Cell(row, serial));
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

void GpuInventory::NoteUuid(const PciAddress& pci, const std::string& uuid) {
  for (GpuInfo& gpu : gpus_) {
    if (gpu.pci == pci) {
      if (gpu.uuid.empty()) gpu.uuid = uuid;
      return;
    }
  }
  GpuInfo learned;
  learned.pci = pci;
  learned.uuid = uuid;
  gpus_.push_back(std::move(learned));
}

GpuInfo GpuInventory::At(const PciAddress& pci) const {
  for (const GpuInfo& gpu : gpus_) {
    if (gpu.pci == pci) return gpu;
  }
  GpuInfo unknown;
  unknown.pci = pci;
  return unknown;
}

std::vector<uint32_t> LocalRanksOnGpu(const GpuInfo& gpu, const std::optional<std::string>& visible,
                                      uint32_t local_ranks) {
  std::vector<uint32_t> ranks;
  if (gpu.index < 0 && (!visible || gpu.uuid.empty())) return ranks;
  if (!visible) {
    if (static_cast<uint32_t>(gpu.index) < local_ranks) ranks.push_back(gpu.index);
    return ranks;
  }
  const std::vector<absl::string_view> entries = Cells(*visible);
  for (uint32_t i = 0; i < local_ranks && i < entries.size(); ++i) {
    if (Names(entries[i], gpu)) ranks.push_back(i);
  }
  return ranks;
}

}  // namespace trainsup
