#include "agent/nvidia_smi_q.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

// A reason's line under "Clocks Event Reasons", as nvidia-smi names it.
struct ReasonName {
  absl::string_view name;
  uint64_t bit;
};
constexpr ReasonName kReasons[] = {
    {"Idle", kClockGpuIdle},
    {"Applications Clocks Setting", kClockApplicationsSetting},
    {"SW Power Cap", kClockSwPowerCap},
    {"HW Slowdown", kClockHwSlowdown},
    {"HW Thermal Slowdown", kClockHwThermalSlowdown},
    {"HW Power Brake Slowdown", kClockHwPowerBrakeSlowdown},
    {"Sync Boost", kClockSyncBoost},
    {"SW Thermal Slowdown", kClockSwThermalSlowdown},
    {"Display Clock Setting", kClockDisplaySetting},
};

size_t Indent(absl::string_view line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

}  // namespace

absl::StatusOr<std::vector<GpuHealth>> ParseNvidiaSmiQuery(absl::string_view text) {
  if (text.size() > kMaxNvidiaSmiQueryBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvidia-smi printed ", text.size(), " bytes, past ", kMaxNvidiaSmiQueryBytes));
  }
  std::vector<GpuHealth> gpus;
  // Where in the current GPU's block we are: the section a line belongs to
  // is the last line of less indent that has no value.
  std::string section;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (absl::StartsWith(line, "GPU ") && Indent(line) == 0) {
      GpuHealth gpu;
      gpu.index = static_cast<int>(gpus.size());  // nvidia-smi lists GPUs by index
      gpu.pci_bus_id = std::string(line.substr(4));
      gpus.push_back(std::move(gpu));
      section.clear();
      continue;
    }
    if (gpus.empty() || line.empty()) continue;
    GpuHealth& gpu = gpus.back();
    const size_t colon = line.find(" : ");
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    if (colon == absl::string_view::npos) {
      if (Indent(line) == 4) section = std::string(key);
      continue;
    }
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 3));
    if (Indent(line) == 4) {
      section.clear();
      if (key == "GPU UUID") gpu.uuid = std::string(value);
      continue;
    }
    if (section == "Clocks Event Reasons" || section == "Clocks Throttle Reasons") {
      for (const ReasonName& r : kReasons) {
        if (key != r.name) continue;
        uint64_t reasons = gpu.clock_event_reasons.value_or(0);
        if (value == "Active") reasons |= r.bit;
        gpu.clock_event_reasons = reasons;
      }
    } else if (section == "Remapped Rows") {
      double n = 0;
      if (key == "Uncorrectable Error" && absl::SimpleAtod(value, &n)) {
        gpu.uncorrectable_remapped_rows = n;
      }
      if (key == "Pending") gpu.row_remap_pending = value == "Yes";
      if (key == "Remapping Failure Occurred") gpu.row_remap_failure = value == "Yes" ? 1 : 0;
    } else if (key == "Replays Since Reset") {
      double n = 0;
      if (absl::SimpleAtod(value, &n)) gpu.pcie_replays = n;
    } else if (key == "GPU Current Temp") {
      double c = 0;
      if (absl::SimpleAtod(absl::StripSuffix(value, " C"), &c)) gpu.temperature_c = c;
    }
  }
  if (gpus.empty()) return absl::InvalidArgumentError("no GPU block in nvidia-smi -q's output");
  return gpus;
}

}  // namespace trainsup
