#include "daemon/core/xid_catalog.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

XidAction ActionOf(uint32_t code, absl::string_view message = "") {
  return XidCatalog().Meaning(code, message).action;
}

TEST(XidCatalogTest, TheGpuOrTheMachineToResetLeavesAtOnce) {
  const XidMeaning bus = XidCatalog().Meaning(79, "GPU has fallen off the bus.");
  EXPECT_EQ(bus.mnemonic, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS");
  EXPECT_EQ(bus.bucket, "RESTART_BM");
  EXPECT_EQ(bus.action, XidAction::kLeave);
  EXPECT_EQ(bus.why, "catalog: RESTART_BM");
  for (uint32_t code : {46u, 48u, 62u, 64u, 74u, 95u, 109u, 119u, 120u, 140u}) {
    EXPECT_EQ(ActionOf(code), XidAction::kLeave) << code;
  }
}

TEST(XidCatalogTest, TheApplicationsErrorsAreTheWorkloads) {
  for (uint32_t code : {13u, 31u, 45u, 94u}) {
    EXPECT_EQ(ActionOf(code), XidAction::kWorkload) << code;
  }
}

TEST(XidCatalogTest, WhatTheCatalogIgnoresOrCannotSayIsReportedOnly) {
  for (uint32_t code : {43u, 92u, 1u, 173u, 9999u}) {
    EXPECT_EQ(ActionOf(code), XidAction::kReport) << code;
  }
  EXPECT_EQ(XidCatalog().Meaning(9999, "").why, "not in the catalog");
  EXPECT_EQ(XidCatalog().Meaning(9999, "").mnemonic, "");
}

TEST(XidCatalogTest, APendingRowRemapDrains) {
  const XidMeaning remap =
      XidCatalog().Meaning(63, "Row Remapper: New row marked for remapping, reset gpu to activate");
  EXPECT_EQ(remap.bucket, "IGNORE");  // as the catalog says; the GPU's reset is what is due
  EXPECT_EQ(remap.action, XidAction::kDrain);
}

TEST(XidCatalogTest, Xid154SaysItsOwnRecoveryAction) {
  // The recorded texts (tests/testdata/gpu/xid_lines.txt).
  EXPECT_EQ(ActionOf(154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"),
            XidAction::kDrain);
  EXPECT_EQ(ActionOf(154, "GPU recovery action changed from 0x4 (Drain and Reset) to 0x1 (GPU "
                          "Reset Required)"),
            XidAction::kLeave);
  // The catalog's own example.
  EXPECT_EQ(ActionOf(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot "
                          "Required)"),
            XidAction::kLeave);
  EXPECT_EQ(ActionOf(154, "GPU recovery action changed from 0x4 (Drain and Reset) to 0x0 (None)"),
            XidAction::kReport);
  EXPECT_EQ(ActionOf(154, "garbled"), XidAction::kReport);
}

TEST(XidCatalogTest, Nvlink5XidsSayWhetherTheyAreFatal) {
  EXPECT_EQ(ActionOf(149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 "
                          "0x00000000 0x00000000 0x00000000 0x00000000)"),
            XidAction::kLeave);
  EXPECT_EQ(ActionOf(145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
                          "0x00000000 0x00100000 0x00000004)"),
            XidAction::kReport);
}

TEST(XidCatalogTest, TheOperatorOverridesACode) {
  absl::StatusOr<XidCatalog> catalog = XidCatalog::WithOverrides({"13=leave", "79=report"});
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  EXPECT_EQ(catalog->Meaning(13, "").action, XidAction::kLeave);
  EXPECT_EQ(catalog->Meaning(79, "").action, XidAction::kReport);
  EXPECT_EQ(catalog->Meaning(79, "").why, "--xid-action");
  EXPECT_EQ(catalog->Meaning(48, "").action, XidAction::kLeave);
  for (const char* bad : {"13", "13=", "x=leave", "0=leave", "70000=leave", "13=reboot"}) {
    absl::StatusOr<XidCatalog> refused = XidCatalog::WithOverrides({bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("report, workload, drain, leave"));
  }
}

TEST(XidCatalogTest, ActionNamesRoundTrip) {
  for (int i = 0; i < kXidActionCount; ++i) {
    const auto action = static_cast<XidAction>(i);
    EXPECT_EQ(ParseXidAction(XidActionName(action)), action);
  }
  EXPECT_FALSE(ParseXidAction("quarantine").has_value());
}

}  // namespace
}  // namespace trainsup
