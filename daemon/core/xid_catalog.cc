#include "daemon/core/xid_catalog.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

struct CatalogRow {
  uint32_t code;
  const char* mnemonic;
  const char* bucket;  // "Resolution Bucket (Immediate Action)"
};

// NVIDIA's Xid catalog (Xid-Catalog.xlsx of docs.nvidia.com/deploy/xid-errors,
// sheet "Xids": code, mnemonic, immediate action), all 172 codes as
// published; docs/gpu.md says where the copy came from. Sorted by code.
constexpr CatalogRow kCatalog[] = {
    {1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT"},
    {2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "CONTACT_SUPPORT"},
    {3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "CONTACT_SUPPORT"},
    {4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "CONTACT_SUPPORT"},
    {5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "CONTACT_SUPPORT"},
    {6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "CONTACT_SUPPORT"},
    {7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "CONTACT_SUPPORT"},
    {8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP"},
    {9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "CONTACT_SUPPORT"},
    {10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "CONTACT_SUPPORT"},
    {11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP"},
    {12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "CONTACT_SUPPORT"},
    {13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"},
    {14, "ROBUST_CHANNEL_FAKE_ERROR", "IGNORE"},
    {15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "CONTACT_SUPPORT"},
    {16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "CONTACT_SUPPORT"},
    {17, "ROBUST_CHANNEL_PARAMETER_ERROR", "CONTACT_SUPPORT"},
    {18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "CONTACT_SUPPORT"},
    {19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "CONTACT_SUPPORT"},
    {20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "CONTACT_SUPPORT"},
    {21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "CONTACT_SUPPORT"},
    {22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "CONTACT_SUPPORT"},
    {23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "CONTACT_SUPPORT"},
    {24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "CONTACT_SUPPORT"},
    {25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP"},
    {26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "CONTACT_SUPPORT"},
    {27, "ROBUST_CHANNEL_VP_ERROR", "CONTACT_SUPPORT"},
    {28, "ROBUST_CHANNEL_VP2_ERROR", "CONTACT_SUPPORT"},
    {29, "ROBUST_CHANNEL_BSP_ERROR", "CONTACT_SUPPORT"},
    {30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "CONTACT_SUPPORT"},
    {31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"},
    {32, "ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP"},
    {33, "ROBUST_CHANNEL_SEC_ERROR", "CONTACT_SUPPORT"},
    {34, "ROBUST_CHANNEL_MSVLD_ERROR", "CONTACT_SUPPORT"},
    {35, "ROBUST_CHANNEL_MSPDEC_ERROR", "CONTACT_SUPPORT"},
    {36, "ROBUST_CHANNEL_MSPPP_ERROR", "CONTACT_SUPPORT"},
    {37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE"},
    {38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE"},
    {39, "ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP"},
    {40, "ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP"},
    {41, "ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP"},
    {42, "ROBUST_CHANNEL_VIC_ERROR", "CONTACT_SUPPORT"},
    {43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"},
    {44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE"},
    {45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"},
    {46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"},
    {47, "ROBUST_CHANNEL_NVENC0_ERROR", "CONTACT_SUPPORT"},
    {48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"},
    {49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "CONTACT_SUPPORT"},
    {50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "CONTACT_SUPPORT"},
    {51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "CONTACT_SUPPORT"},
    {52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "CONTACT_SUPPORT"},
    {53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "CONTACT_SUPPORT"},
    {54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS"},
    {55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "CONTACT_SUPPORT"},
    {56, "DISPLAY_CHANNEL_EXCEPTION", "CONTACT_SUPPORT"},
    {57, "FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT"},
    {58, "FB_MEMORY_ERROR", "CONTACT_SUPPORT"},
    {59, "PMU_ERROR", "CONTACT_SUPPORT"},
    {60, "ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP"},
    {61, "PMU_BREAKPOINT", "CONTACT_SUPPORT"},
    {62, "PMU_HALT_ERROR", "RESET_GPU"},
    {63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"},
    {64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"},
    {65, "ROBUST_CHANNEL_NVENC1_ERROR", "CONTACT_SUPPORT"},
    {66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE"},
    {67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE"},
    {68, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"},
    {69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP"},
    {70, "ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP"},
    {71, "ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP"},
    {72, "ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP"},
    {73, "ROBUST_CHANNEL_NVENC2_ERROR", "CONTACT_SUPPORT"},
    {74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"},
    {75, "ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP"},
    {76, "ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP"},
    {77, "ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP"},
    {78, "VGPU_START_ERROR", "UPDATE_SWFW"},
    {79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"},
    {80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP"},
    {81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "CONTACT_SUPPORT"},
    {82, "ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP"},
    {83, "ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP"},
    {84, "ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP"},
    {85, "ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP"},
    {86, "ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP"},
    {87, "NVTELEMETRY_DRIVER_REPORT", "CONTACT_SUPPORT"},
    {88, "ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP"},
    {89, "ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP"},
    {90, "LTC_ERROR", "CONTACT_SUPPORT"},
    {91, "RESERVED_XID", "CONTACT_SUPPORT"},
    {92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE"},
    {93, "INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE"},
    {94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"},
    {95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"},
    {96, "ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP"},
    {97, "ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP"},
    {98, "ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP"},
    {99, "ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP"},
    {100, "ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP"},
    {101, "ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP"},
    {102, "ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP"},
    {103, "ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP"},
    {104, "ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP"},
    {105, "ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP"},
    {106, "SMBPBI_TEST_MESSAGE", "IGNORE"},
    {107, "SMBPBI_TEST_MESSAGE_SILENT", "IGNORE"},
    {108, "NVLINK_REMOTE_TRANSLATION_ERROR", "IGNORE"},
    {109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"},
    {110, "SEC_FAULT_ERROR", "RESET_GPU"},
    {111, "BUNDLE_ERROR_EVENT", "CONTACT_SUPPORT"},
    {112, "DISP_SUPERVISOR_ERROR", "CONTACT_SUPPORT"},
    {113, "DP_LT_FAILURE", "CONTACT_SUPPORT"},
    {114, "HEAD_RG_UNDERFLOW", "CONTACT_SUPPORT"},
    {115, "CORE_CHANNEL_REGS", "CONTACT_SUPPORT"},
    {116, "WINDOW_CHANNEL_REGS", "CONTACT_SUPPORT"},
    {117, "CURSOR_CHANNEL_REGS", "CONTACT_SUPPORT"},
    {118, "HEAD_REGS", "CONTACT_SUPPORT"},
    {119, "GSP_RPC_TIMEOUT", "RESET_GPU"},
    {120, "GSP_ERROR", "RESET_GPU"},
    {121, "C2C_ERROR", "IGNORE"},
    {122, "SPI_PMU_RPC_READ_FAIL", "CONTACT_SUPPORT"},
    {123, "SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT"},
    {124, "SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT"},
    {125, "INFOROM_FS_ERROR", "CONTACT_SUPPORT"},
    {126, "ROBUST_CHANNEL_CE10_ERROR", "RESTART_APP"},
    {127, "ROBUST_CHANNEL_CE11_ERROR", "RESTART_APP"},
    {128, "ROBUST_CHANNEL_CE12_ERROR", "RESTART_APP"},
    {129, "ROBUST_CHANNEL_CE13_ERROR", "RESTART_APP"},
    {130, "ROBUST_CHANNEL_CE14_ERROR", "RESTART_APP"},
    {131, "ROBUST_CHANNEL_CE15_ERROR", "RESTART_APP"},
    {132, "ROBUST_CHANNEL_CE16_ERROR", "RESTART_APP"},
    {133, "ROBUST_CHANNEL_CE17_ERROR", "RESTART_APP"},
    {134, "ROBUST_CHANNEL_CE18_ERROR", "RESTART_APP"},
    {135, "ROBUST_CHANNEL_CE19_ERROR", "RESTART_APP"},
    {136, "ALI_TRAINING_FAIL", "RESET_GPU"},
    {137, "NVLINK_PRIV_ERR", "IGNORE"},
    {138, "ROBUST_CHANNEL_DLA_ERROR", "CONTACT_SUPPORT"},
    {139, "ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP"},
    {140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"},
    {141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE"},
    {142, "ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT"},
    {143, "GPU_INIT_ERROR", "RESET_GPU"},
    {144, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {145, "NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {146, "NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {147, "NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {148, "NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {150, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR"},
    {151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM"},
    {152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE"},
    {153, "ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE"},
    {154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154"},
    {155, "NVLINK_SW_DEFINED_ERROR", "RESET_GPU"},
    {156, "RESOURCE_RETIREMENT_EVENT", "RESET_GPU"},
    {157, "RESOURCE_RETIREMENT_FAILURE", "IGNORE"},
    {158, "GPU_FATAL_TIMEOUT", "RESET_GPU"},
    {159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM"},
    {160, "CHANNEL_RETIREMENT_EVENT", "IGNORE"},
    {161, "CHANNEL_RETIREMENT_FAILURE", "IGNORE"},
    {162, "PSHC_REENGAGED", ""},
    {163, "PSHC_DISENGAGED", ""},
    {164, "PSHC_LOW_LIFETIME", ""},
    {165, "PSHC_ZERO_LIFETIME", ""},
    {166, "NVLINK_SECURE_CRYPTO_ERR", ""},
    {167, "PCIE_FATAL_TIMEOUT", ""},
    {168, "REDUCED_GPU_MEMORY_CAPACITY", ""},
    {169, "SEC2_HALT_ERROR", ""},
    {170, "NVLINK_SECURE_OTHER", ""},
    {171, "UNCORRECTABLE_DRAM_ERROR", ""},
    {172, "UNCORRECTABLE_SRAM_ERROR", ""},
};

// The bucket's action. The catalog names the buckets in its sheet
// "Resolution Buckets".
XidAction ActionOfBucket(absl::string_view bucket) {
  if (bucket == "RESTART_APP" || bucket == "WORKFLOW_XID_45") return XidAction::kWorkload;
  if (bucket == "RESET_GPU" || bucket == "RESTART_BM" || bucket == "RESTART_VM" ||
      bucket == "WORKFLOW_XID_48" || bucket == "WORKFLOW_NVLINK_ERR") {
    return XidAction::kLeave;
  }
  if (bucket == "CHECK_MECHANICALS") return XidAction::kDrain;
  return XidAction::kReport;  // IGNORE, CONTACT_SUPPORT, CHECK_UVM, UPDATE_SWFW, none
}

// Xid 154 names the recovery action the driver wants ("GPU recovery action
// changed from 0x0 (None) to 0x4 (Drain and Reset)"); the catalog lists
// None, Drain P2P, Drain and Reset, GPU Reset Required, Node Reboot Required.
std::optional<XidAction> ActionOf154(absl::string_view message) {
  const size_t to = message.rfind(" to ");
  if (to == absl::string_view::npos) return std::nullopt;
  const absl::string_view wanted = message.substr(to);
  if (absl::StrContains(wanted, "Reset Required") || absl::StrContains(wanted, "Reboot Required")) {
    return XidAction::kLeave;
  }
  if (absl::StrContains(wanted, "Drain")) return XidAction::kDrain;
  if (absl::StrContains(wanted, "None")) return XidAction::kReport;
  return std::nullopt;
}

// Xids 144-150 (NVLink5) say in their text whether the error is fatal:
// "RLW_RXPIPE Nonfatal XC0 ..." / "NETIR_LINK_EVT  Fatal   XC0 ...".
std::optional<XidAction> ActionOfNvlink5(absl::string_view message) {
  if (absl::StrContains(message, " Fatal ")) return XidAction::kLeave;
  if (absl::StrContains(message, "Nonfatal")) return XidAction::kReport;
  return std::nullopt;
}

const CatalogRow* Find(uint32_t code) {
  const CatalogRow* end = std::end(kCatalog);
  const CatalogRow* row = std::lower_bound(
      std::begin(kCatalog), end, code, [](const CatalogRow& r, uint32_t c) { return r.code < c; });
  return row != end && row->code == code ? row : nullptr;
}

}  // namespace

absl::string_view XidActionName(XidAction action) {
  switch (action) {
    case XidAction::kReport:
      return "report";
    case XidAction::kWorkload:
      return "workload";
    case XidAction::kDrain:
      return "drain";
    case XidAction::kLeave:
      return "leave";
  }
  return "report";
}

std::optional<XidAction> ParseXidAction(absl::string_view name) {
  for (int i = 0; i < kXidActionCount; ++i) {
    const auto action = static_cast<XidAction>(i);
    if (XidActionName(action) == name) return action;
  }
  return std::nullopt;
}

absl::StatusOr<XidCatalog> XidCatalog::WithOverrides(const std::vector<std::string>& entries) {
  XidCatalog catalog;
  for (const std::string& entry : entries) {
    const size_t eq = entry.find('=');
    uint32_t code = 0;
    const std::optional<XidAction> action =
        eq == std::string::npos ? std::nullopt
                                : ParseXidAction(absl::string_view(entry).substr(eq + 1));
    if (eq == std::string::npos || !absl::SimpleAtoi(entry.substr(0, eq), &code) || code == 0 ||
        code > 65535 || !action) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--xid-action '", entry, "': want CODE=ACTION, ACTION one of report, workload, drain, leave"));
    }
    catalog.overrides_[code] = *action;
  }
  return catalog;
}

XidMeaning XidCatalog::Meaning(uint32_t code, absl::string_view message) const {
  XidMeaning m;
  m.code = code;
  if (const CatalogRow* row = Find(code); row != nullptr) {
    m.mnemonic = row->mnemonic;
    m.bucket = row->bucket;
  }
  if (auto it = overrides_.find(code); it != overrides_.end()) {
    m.action = it->second;
    m.why = "--xid-action";
    return m;
  }
  std::optional<XidAction> by_text;
  if (code == 154) by_text = ActionOf154(message);
  if (code >= 144 && code <= 150) by_text = ActionOfNvlink5(message);
  if (by_text) {
    m.action = *by_text;
    m.why = "the driver's text";
    return m;
  }
  if (code == 63) {
    // A row marked for remapping ("reset gpu to activate"): the catalog's
    // immediate action is IGNORE (the GPU works on), the remap takes effect
    // at the next reset, which a drain gives it without stopping the job.
    m.action = XidAction::kDrain;
    m.why = "a row remap pending until the GPU's next reset";
    return m;
  }
  m.action = ActionOfBucket(m.bucket);
  m.why = m.bucket.empty() ? std::string("not in the catalog") : absl::StrCat("catalog: ", m.bucket);
  return m;
}

}  // namespace trainsup
