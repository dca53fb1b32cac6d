#ifndef TRAINSUP_AGENT_XID_LINE_H_
#define TRAINSUP_AGENT_XID_LINE_H_

// The NVIDIA driver's Xid lines in the kernel log (docs/gpu.md). The driver
// prints (open-gpu-kernel-modules, kernel_rc.c, krcReportXid):
//
//   NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
//   NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.          (no process)
//   NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...    (MIG)
//
// older drivers `pid='<unknown>', name=<unknown>, ` and, older still, no
// `PCI:`. Whatever comes before `NVRM:` (a /dev/kmsg record's
// `6,1234,5678,-;`, dmesg's `[1234.5]`, syslog's date and host) is skipped.
// Pure; bounded: a line longer than kMaxKernelLogLineBytes is refused unread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace trainsup {

// A PCI function's address as far as a GPU needs it: domain, bus, device.
// The kernel log writes `0000:3b:00`; nvidia-smi `00000000:3B:00.0`.
struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;

  bool operator==(const PciAddress& o) const {
    return domain == o.domain && bus == o.bus && device == o.device;
  }
  bool operator!=(const PciAddress& o) const { return !(*this == o); }
  // As the kernel log writes it: "0000:3b:00".
  std::string ToString() const;
};

// "0000:3b:00", "00000000:3B:00.0", "3b:00" (domain 0), with or without a
// leading "PCI:"; none for anything else.
std::optional<PciAddress> ParsePciAddress(absl::string_view text);

// The longest line read; a /dev/kmsg record is at most 1 KiB of text with
// its prefix, a syslog line a little more.
constexpr size_t kMaxKernelLogLineBytes = 8192;
// The most of an Xid's message kept (the driver's own text after the code).
constexpr size_t kMaxXidMessageBytes = 512;

struct XidRecord {
  uint32_t code = 0;
  std::optional<PciAddress> pci;  // none: the line's address did not parse
  std::string mig;                // "GPU-I:05" when the driver names a MIG instance
  std::optional<uint32_t> pid;    // none: not given, or '<unknown>'
  std::string process;            // "" when not given or <unknown>
  std::string message;            // printable, at most kMaxXidMessageBytes
};

enum class KernelLineKind {
  kXid,       // an Xid line: XidRecord filled
  kOther,     // no Xid line (most of the kernel log)
  kGarbled,   // says "NVRM: Xid" but not in the driver's form (truncated, mangled)
  kTooLong,   // longer than kMaxKernelLogLineBytes: not read
};

// Reads one kernel log line. `record` is filled only for kXid.
KernelLineKind ParseKernelLine(absl::string_view line, XidRecord* record);

// The driver's "NVRM: GPU at PCI:0000:91:00: GPU-b6c3...": the UUID of the
// GPU at an address, printed before its first Xid. False for anything else.
bool ParseGpuAtLine(absl::string_view line, PciAddress* pci, std::string* uuid);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_XID_LINE_H_
