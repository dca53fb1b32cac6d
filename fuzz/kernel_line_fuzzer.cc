// Fuzz target: one line of the kernel log, as the agent's follower hands it
// to ParseKernelLine (docs/gpu.md). Whatever the bytes: a line past the
// limit is refused as too long and nothing else is; an Xid has a code in
// 1..65535 and a printable message within its bound; and the GPU-at parser
// gives an address that prints back to one that parses the same.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "agent/xid_line.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "kernel_line_fuzzer: %s\n", what);
  std::abort();
}

bool Printable(const std::string& text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  trainsup::XidRecord xid;
  const trainsup::KernelLineKind kind = trainsup::ParseKernelLine(line, &xid);
  Require((kind == trainsup::KernelLineKind::kTooLong) == (size > trainsup::kMaxKernelLogLineBytes),
          "kTooLong does not follow the size limit");
  if (kind == trainsup::KernelLineKind::kXid) {
    Require(xid.code >= 1 && xid.code <= 65535, "an Xid code out of range");
    Require(xid.message.size() <= trainsup::kMaxXidMessageBytes, "a message past its bound");
    Require(Printable(xid.message) && Printable(xid.process) && Printable(xid.mig),
            "an unprintable byte kept");
    if (xid.pci) {
      Require(trainsup::ParsePciAddress(xid.pci->ToString()) == xid.pci,
              "an address that does not print back");
    }
  }
  trainsup::PciAddress pci;
  std::string uuid;
  if (trainsup::ParseGpuAtLine(line, &pci, &uuid)) {
    Require(trainsup::ParsePciAddress(pci.ToString()) == pci, "a GPU-at address that does not print back");
    Require(uuid.size() <= 64 && Printable(uuid), "a UUID past its bound");
  }
  return 0;
}
