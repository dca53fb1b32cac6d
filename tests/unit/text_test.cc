// The text helpers that keep foreign text valid UTF-8 (common/format.h) and
// the name and reason rules (common/limits.h).

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/format.h"
#include "common/limits.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

constexpr char kEuro[] = "\xE2\x82\xAC";          // 3 bytes
constexpr char kGrinning[] = "\xF0\x9F\x98\x80";  // 4 bytes
constexpr char kReplacement[] = "\xEF\xBF\xBD";   // U+FFFD

// --- IsValidUtf8 ---

TEST(IsValidUtf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8(std::string("j\xC3\xB6") + kEuro + kGrinning));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
}

TEST(IsValidUtf8Test, RejectsMalformedSequences) {
  EXPECT_FALSE(IsValidUtf8("\x80"));                  // a lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));              // a sequence cut short
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));              // an overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));          // overlong, 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));          // a UTF-16 surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));      // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

// --- ToValidUtf8 ---

TEST(ToValidUtf8Test, LeavesValidTextAlone) {
  const std::string text = std::string("GPU ") + kEuro + kGrinning;
  EXPECT_EQ(ToValidUtf8(text), text);
}

TEST(ToValidUtf8Test, ReplacesEachBadByteAndKeepsTheRest) {
  EXPECT_EQ(ToValidUtf8("a\xFF" "b"), std::string("a") + kReplacement + "b");
  // A sequence cut short by the end: each of its bytes is replaced.
  EXPECT_EQ(ToValidUtf8("x\xE2\x82"), std::string("x") + kReplacement + kReplacement);
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xC0\xAF\xED\xA0\x80\xF4\x90\x80\x80")));
}

// --- Utf8Prefix ---

TEST(Utf8PrefixTest, ShortTextIsWhole) {
  EXPECT_EQ(Utf8Prefix("abc", 3), "abc");
  EXPECT_EQ(Utf8Prefix("abc", 100), "abc");
}

TEST(Utf8PrefixTest, NeverSplitsACharacter) {
  const std::string text = std::string("ab") + kEuro + "c";  // a b [3 bytes] c
  EXPECT_EQ(Utf8Prefix(text, 2), "ab");
  EXPECT_EQ(Utf8Prefix(text, 3), "ab");
  EXPECT_EQ(Utf8Prefix(text, 4), "ab");
  EXPECT_EQ(Utf8Prefix(text, 5), std::string("ab") + kEuro);
  EXPECT_EQ(Utf8Prefix(kGrinning, 3), "");
}

TEST(Utf8PrefixTest, EveryCutOfMixedTextIsValid) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::string("a\xC3\xB6") + kEuro + kGrinning;
  for (size_t max = 0; max <= text.size(); ++max) {
    absl::string_view prefix = Utf8Prefix(text, max);
    EXPECT_LE(prefix.size(), max);
    EXPECT_GE(prefix.size() + 3, std::min(max, text.size()));  // loses at most one character
    EXPECT_TRUE(IsValidUtf8(prefix)) << "cut at " << max;
  }
}

// --- ClipText ---

TEST(ClipTextTest, MarksTheCutWithinTheLimit) {
  EXPECT_EQ(ClipText("short", 10), "short");
  EXPECT_EQ(ClipText("0123456789abc", 10), "0123456...");
  const std::string clipped = ClipText(std::string(2000, 'x') + kEuro, 1024);
  EXPECT_EQ(clipped.size(), 1024u);
  EXPECT_EQ(clipped.substr(1021), "...");
}

TEST(ClipTextTest, OutputCutInsideACharacterStaysValid) {
  // 1 KiB of output whose 1024th byte is the middle of a euro sign.
  const std::string output = std::string(1022, 'x') + kEuro + "tail";
  const std::string clipped = ClipText(output, 1024);
  EXPECT_TRUE(IsValidUtf8(clipped));
  EXPECT_LE(clipped.size(), 1024u);
}

TEST(ClipTextTest, InvalidBytesAreReplacedBeforeCutting) {
  const std::string clipped = ClipText("\xFF\xFE ok", 100);
  EXPECT_EQ(clipped, std::string(kReplacement) + kReplacement + " ok");
}

// --- IsValidName: a leading '-' would read as an option ---

TEST(NameRuleTest, RefusesALeadingDash) {
  EXPECT_FALSE(IsValidName("-"));
  EXPECT_FALSE(IsValidName("--help"));
  EXPECT_FALSE(IsValidName("-rf"));
  EXPECT_TRUE(IsValidName("node-1"));
  EXPECT_TRUE(IsValidName("node-"));
}

// --- IsValidReason ---

TEST(ReasonRuleTest, AcceptsTextOnOneLineUpToTheCap) {
  EXPECT_TRUE(IsValidReason("bad GPU 3"));
  EXPECT_TRUE(IsValidReason(std::string("Xid 79 ") + kEuro));
  EXPECT_TRUE(IsValidReason(std::string(kMaxReasonLength, 'r')));
}

TEST(ReasonRuleTest, RefusesEmptyLongMultilineOrInvalidText) {
  EXPECT_FALSE(IsValidReason(""));
  EXPECT_FALSE(IsValidReason(std::string(kMaxReasonLength + 1, 'r')));
  EXPECT_FALSE(IsValidReason("line one\nline two"));
  EXPECT_FALSE(IsValidReason("tab\there"));
  EXPECT_FALSE(IsValidReason("bad \xFF byte"));
}

// --- ListSome, Counted ---

TEST(ListSomeTest, ShortListsAreWhole) {
  EXPECT_EQ(ListSome(std::vector<std::string>{}), "");
  EXPECT_EQ(ListSome(std::vector<std::string>{"n1"}), "n1");
  EXPECT_EQ(ListSome(std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}), "0, 1, 2, 3, 4, 5, 6, 7");
}

TEST(ListSomeTest, LongListsSayHowManyMore) {
  EXPECT_EQ(ListSome(std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}),
            "0, 1, 2, 3, 4, 5, 6, 7 and 1 more");
  EXPECT_EQ(ListSome(std::vector<std::string>{"a", "b", "c"}, 2), "a, b and 1 more");
}

TEST(ListSomeTest, TwelveThousandFiveHundredNodesStayShort) {
  std::vector<std::string> nodes;
  for (int i = 0; i < 12500; ++i) nodes.push_back("gpu-node-" + std::to_string(100000 + i));
  const std::string text = ListSome(nodes);
  EXPECT_LT(text.size(), 1024u);
  EXPECT_EQ(text.substr(0, 16), "gpu-node-100000,");
  EXPECT_NE(text.find(" and 12492 more"), std::string::npos);
}

TEST(CountedTest, SingularAndPlural) {
  EXPECT_EQ(Counted(1, "node", "nodes"), "1 node");
  EXPECT_EQ(Counted(0, "node", "nodes"), "0 nodes");
  EXPECT_EQ(Counted(12500, "node", "nodes"), "12500 nodes");
}

}  // namespace
}  // namespace trainsup
