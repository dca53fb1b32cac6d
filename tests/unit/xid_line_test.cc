#include "agent/xid_line.h"

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

// The lines of a recorded file of tests/testdata/gpu (README.md there says
// where each came from); lines starting with '#' are the file's comments.
std::vector<std::string> Recorded(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/" + name);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

XidRecord Parse(const std::string& line) {
  XidRecord xid;
  EXPECT_EQ(ParseKernelLine(line, &xid), KernelLineKind::kXid) << line;
  return xid;
}

TEST(XidLineTest, EveryRecordedLineIsAnXidWithTheCodeItPrints) {
  const std::vector<std::string> lines = Recorded("xid_lines.txt");
  ASSERT_EQ(lines.size(), 59u);
  // An oracle of its own: the number after "): ".
  const std::regex code_re(R"(NVRM: Xid \([^)]*\): (\d+))");
  int with_address = 0;
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, code_re)) << line;
    const XidRecord xid = Parse(line);
    EXPECT_EQ(xid.code, static_cast<uint32_t>(std::stoul(m[1]))) << line;
    with_address += xid.pci.has_value() ? 1 : 0;
  }
  // Two recordings had their address blanked by the user who posted them
  // ("PCI:..."): the Xid still counts, as the node's.
  EXPECT_EQ(with_address, 57);
}

TEST(XidLineTest, TheProcessIsReadWhenTheDriverKnewIt) {
  const XidRecord xid = Parse(
      "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, "
      "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 "
      "(GSP_RM_ALLOC) (0x2081 0x4).");
  EXPECT_EQ(xid.code, 119u);
  EXPECT_EQ(xid.pci->ToString(), "0000:9b:00");
  EXPECT_EQ(xid.pid, 2024380u);
  EXPECT_EQ(xid.process, "nvidia-smi");
  EXPECT_THAT(xid.message, HasSubstr("Timeout after 6s of waiting for RPC response"));
}

TEST(XidLineTest, AnUnknownProcessAndNoProcessAtAllLeaveBothEmpty) {
  const XidRecord unknown = Parse(
      "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has "
      "fallen off the bus.");
  EXPECT_FALSE(unknown.pid.has_value());
  EXPECT_EQ(unknown.process, "");
  EXPECT_EQ(unknown.message, "GPU has fallen off the bus.");
  const XidRecord none = Parse("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus");
  EXPECT_FALSE(none.pid.has_value());
  EXPECT_EQ(none.message, "GPU has fallen off the bus");
}

TEST(XidLineTest, AMigInstanceAndAGraceDomainAreKept) {
  const XidRecord mig =
      Parse("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No");
  EXPECT_EQ(mig.mig, "GPU-I:05");
  EXPECT_EQ(mig.pci->ToString(), "0000:01:00");
  EXPECT_EQ(mig.pid, 7194u);
  EXPECT_EQ(mig.process, "");  // this driver printed no name=
  const XidRecord grace = Parse(
      "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 "
      "(None) to 0x4 (Drain and Reset)");
  EXPECT_EQ(grace.pci->domain, 9u);
  EXPECT_THAT(grace.message, HasSubstr("to 0x4 (Drain and Reset)"));
}

TEST(XidLineTest, SyslogAndJournalPrefixesAreSkipped) {
  const XidRecord syslog = Parse(
      "May 19 07:08:57 ip-26-0-146-100 kernel: [680111.646286] NVRM: Xid (PCI:0000:10:1c): 63, "
      "pid=1850, Row Remapper: New row marked for remapping, reset gpu to activate");
  EXPECT_EQ(syslog.code, 63u);
  EXPECT_EQ(syslog.pci->device, 0x1cu);
  EXPECT_EQ(syslog.pid, 1850u);
  EXPECT_THAT(syslog.message, HasSubstr("reset gpu to activate"));
  const XidRecord journal = Parse(
      "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
      "previous Xid 149");
  EXPECT_EQ(journal.code, 45u);
  EXPECT_EQ(journal.process, "python3");
  EXPECT_THAT(journal.message, HasSubstr("caused by previous Xid 149"));
}

TEST(XidLineTest, AroundAnXidTheDriversOtherLinesAndNvswitchSxidsAreNoXid) {
  // Raw kmsg records, the driver's lines around an Xid 79 (the GPU's UUID,
  // its serial), NVSwitch SXids, a fallen-off-the-bus message without an Xid.
  std::vector<uint32_t> codes;
  int other = 0;
  for (const std::string& line : Recorded("kmsg_context.txt")) {
    XidRecord xid;
    const KernelLineKind kind = ParseKernelLine(line, &xid);
    EXPECT_NE(kind, KernelLineKind::kGarbled) << line;
    if (kind == KernelLineKind::kXid) codes.push_back(xid.code);
    other += kind == KernelLineKind::kOther ? 1 : 0;
  }
  EXPECT_EQ(codes, std::vector<uint32_t>{79});
  EXPECT_GT(other, 20);
}

TEST(XidLineTest, EveryCutOfARecordedLineIsAnXidOrGarbledNeverMore) {
  // A line cut anywhere (a kmsg record truncated, a log rotated mid-line).
  for (const std::string& line : Recorded("xid_lines.txt")) {
    const size_t at = line.find("NVRM: Xid");
    for (size_t cut = at + 1; cut < line.size(); ++cut) {
      XidRecord xid;
      const KernelLineKind kind = ParseKernelLine(line.substr(0, cut), &xid);
      if (cut < at + 9) {
        EXPECT_EQ(kind, KernelLineKind::kOther) << cut;
      } else if (kind == KernelLineKind::kXid) {
        EXPECT_GT(xid.code, 0u);
        EXPECT_LE(xid.message.size(), kMaxXidMessageBytes);
      } else {
        EXPECT_EQ(kind, KernelLineKind::kGarbled) << line.substr(0, cut);
      }
    }
  }
}

TEST(XidLineTest, GarbledTooLongAndHostileLinesAreRefused) {
  XidRecord xid;
  EXPECT_EQ(ParseKernelLine("NVRM: Xid (PCI:0000:91:00", &xid), KernelLineKind::kGarbled);
  EXPECT_EQ(ParseKernelLine("NVRM: Xid (PCI:0000:91:00): seventy-nine", &xid),
            KernelLineKind::kGarbled);
  EXPECT_EQ(ParseKernelLine("NVRM: Xid (PCI:0000:91:00): 99999999, x", &xid),
            KernelLineKind::kGarbled);
  EXPECT_EQ(ParseKernelLine("NVRM: Xid (PCI:0000:91:00): 79, pid=12x4, name=a, b", &xid),
            KernelLineKind::kGarbled);
  EXPECT_EQ(ParseKernelLine(std::string(kMaxKernelLogLineBytes + 1, 'x'), &xid),
            KernelLineKind::kTooLong);
  // Bytes a terminal would act on never reach an event.
  ASSERT_EQ(ParseKernelLine("NVRM: Xid (PCI:0000:91:00): 79, GPU \x1b[31mgone\x07", &xid),
            KernelLineKind::kXid);
  EXPECT_EQ(xid.message, "GPU ?[31mgone?");
  const std::string huge = "NVRM: Xid (PCI:0000:91:00): 79, " + std::string(4000, 'm');
  ASSERT_EQ(ParseKernelLine(huge, &xid), KernelLineKind::kXid);
  EXPECT_EQ(xid.message.size(), kMaxXidMessageBytes);
}

TEST(XidLineTest, AddressesOfTheKernelAndOfNvidiaSmiAreTheSameGpu) {
  EXPECT_EQ(ParsePciAddress("PCI:0000:1a:00"), ParsePciAddress("00000000:1A:00.0"));
  EXPECT_EQ(ParsePciAddress("1a:00"), ParsePciAddress("0000:1a:00"));
  EXPECT_NE(ParsePciAddress("0000:1a:00"), ParsePciAddress("0001:1a:00"));
  for (const char* bad : {"", "PCI:...", "0000:1a", "0000:1a:00:00", "0000:1g:00", "0000:1a:00.x",
                          "123456789:1a:00", "0000:123:00"}) {
    EXPECT_FALSE(ParsePciAddress(bad).has_value()) << bad;
  }
  EXPECT_EQ(ParsePciAddress("00000000:DB:00.0")->ToString(), "0000:db:00");
}

TEST(XidLineTest, TheDriverNamesAGpusUuidBeforeItsFirstXid) {
  PciAddress pci;
  std::string uuid;
  ASSERT_TRUE(ParseGpuAtLine(
      "[6781741.548768] NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b",
      &pci, &uuid));
  EXPECT_EQ(pci.ToString(), "0000:91:00");
  EXPECT_EQ(uuid, "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b");
  EXPECT_FALSE(ParseGpuAtLine("[6781741.548776] NVRM: GPU Board Serial Number: 1653723052734",
                              &pci, &uuid));
}

}  // namespace
}  // namespace trainsup
