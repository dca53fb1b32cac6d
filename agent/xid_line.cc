#include "agent/xid_line.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

constexpr absl::string_view kXidMarker = "NVRM: Xid";
constexpr absl::string_view kGpuAtMarker = "NVRM: GPU at ";

// `text` as hexadecimal of at most `max_digits` digits.
bool ParseHex(absl::string_view text, size_t max_digits, uint32_t* out) {
  if (text.empty() || text.size() > max_digits) return false;
  uint32_t value = 0;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    const int digit = absl::ascii_isdigit(static_cast<unsigned char>(c))
                          ? c - '0'
                          : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    value = value * 16 + static_cast<uint32_t>(digit);
  }
  *out = value;
  return true;
}

// Takes `prefix` off the front of `*text` when it is there.
bool Consume(absl::string_view* text, absl::string_view prefix) {
  if (!absl::StartsWith(*text, prefix)) return false;
  text->remove_prefix(prefix.size());
  return true;
}

// The text up to ", " (taken with it), or all of it when there is none.
absl::string_view TakeField(absl::string_view* text) {
  const size_t comma = text->find(", ");
  absl::string_view field = text->substr(0, comma);
  text->remove_prefix(comma == absl::string_view::npos ? text->size() : comma + 2);
  return field;
}

// Printable ASCII only (a kernel line may carry anything), at most `limit`.
std::string Printable(absl::string_view text, size_t limit) {
  text = absl::StripAsciiWhitespace(text);
  std::string out;
  out.reserve(std::min(text.size(), limit));
  for (char c : text.substr(0, limit)) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u >= 0x20 && u < 0x7f ? c : '?');
  }
  return out;
}

bool IsUnknown(absl::string_view value) {
  return value == "<unknown>" || value == "'<unknown>'";
}

}  // namespace

std::string PciAddress::ToString() const {
  return absl::StrFormat("%04x:%02x:%02x", domain, bus, device);
}

std::optional<PciAddress> ParsePciAddress(absl::string_view text) {
  Consume(&text, "PCI:");
  // The function (".0") is the GPU's own; nothing else follows the device.
  if (const size_t dot = text.find('.'); dot != absl::string_view::npos) {
    uint32_t function = 0;
    if (!ParseHex(text.substr(dot + 1), 1, &function)) return std::nullopt;
    text = text.substr(0, dot);
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  PciAddress pci;
  size_t i = 0;
  if (parts.size() == 3) {
    if (!ParseHex(parts[0], 8, &pci.domain)) return std::nullopt;
    i = 1;
  } else if (parts.size() != 2) {
    return std::nullopt;
  }
  if (!ParseHex(parts[i], 2, &pci.bus) || !ParseHex(parts[i + 1], 2, &pci.device)) {
    return std::nullopt;
  }
  return pci;
}

KernelLineKind ParseKernelLine(absl::string_view line, XidRecord* record) {
  if (line.size() > kMaxKernelLogLineBytes) return KernelLineKind::kTooLong;
  const size_t at = line.find(kXidMarker);
  if (at == absl::string_view::npos) return KernelLineKind::kOther;
  absl::string_view rest = line.substr(at + kXidMarker.size());
  rest = absl::StripLeadingAsciiWhitespace(rest);
  // "(PCI:0000:3b:00 GPU-I:05): "
  if (!Consume(&rest, "(")) return KernelLineKind::kGarbled;
  const size_t close = rest.find("):");
  if (close == absl::string_view::npos || close > 64) return KernelLineKind::kGarbled;
  absl::string_view where = rest.substr(0, close);
  rest.remove_prefix(close + 2);
  XidRecord xid;
  const size_t space = where.find(' ');
  if (space != absl::string_view::npos) {
    xid.mig = Printable(where.substr(space + 1), 32);
    where = where.substr(0, space);
  }
  xid.pci = ParsePciAddress(where);  // a user may have blanked it: the node's then
  // "79, " then the driver's text (or "79" alone, cut short).
  rest = absl::StripLeadingAsciiWhitespace(rest);
  const absl::string_view code = TakeField(&rest);
  if (code.empty() || code.size() > 5 || !absl::SimpleAtoi(code, &xid.code) || xid.code == 0 ||
      xid.code > 65535) {
    return KernelLineKind::kGarbled;
  }
  // "pid=1234, name=python3, " when the driver knew the process.
  absl::string_view probe = rest;
  if (Consume(&probe, "pid=")) {
    const absl::string_view pid = TakeField(&probe);
    uint32_t value = 0;
    if (absl::SimpleAtoi(pid, &value)) {
      xid.pid = value;
    } else if (!IsUnknown(pid)) {
      return KernelLineKind::kGarbled;
    }
    rest = probe;
    if (Consume(&probe, "name=")) {
      const absl::string_view name = TakeField(&probe);
      if (!IsUnknown(name)) xid.process = Printable(name, 64);
      rest = probe;
    }
  }
  xid.message = Printable(rest, kMaxXidMessageBytes);
  *record = std::move(xid);
  return KernelLineKind::kXid;
}

bool ParseGpuAtLine(absl::string_view line, PciAddress* pci, std::string* uuid) {
  if (line.size() > kMaxKernelLogLineBytes) return false;
  const size_t at = line.find(kGpuAtMarker);
  if (at == absl::string_view::npos) return false;
  absl::string_view rest = line.substr(at + kGpuAtMarker.size());
  const size_t colon = rest.find(": GPU-");
  if (colon == absl::string_view::npos) return false;
  const std::optional<PciAddress> address = ParsePciAddress(rest.substr(0, colon));
  const absl::string_view id = absl::StripAsciiWhitespace(rest.substr(colon + 2));
  if (!address || id.size() > 64 || id.find(' ') != absl::string_view::npos) return false;
  *pci = *address;
  *uuid = Printable(id, 64);
  return true;
}

}  // namespace trainsup
