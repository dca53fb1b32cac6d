// Option values every binary parses the same way (common/options.h).
#include "common/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainsup {
namespace {

using ::testing::HasSubstr;

TEST(OptionsTest, AWholeNumberIsDecimalDigitsOnly) {
  EXPECT_TRUE(CheckWholeNumber("0", 0).ok());
  EXPECT_TRUE(CheckWholeNumber("18446744073709551615", 1).ok());
  for (const char* bad : {"", "-1", "+1", "1.5", "0x10", " 1", "18446744073709551616"}) {
    EXPECT_FALSE(CheckWholeNumber(bad, 0).ok()) << bad;
  }
  absl::Status below = CheckWholeNumber("0", 1);
  EXPECT_EQ(below.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(below.message(), HasSubstr("at least 1"));
}

TEST(OptionsTest, NumbersOutOfRangeSayTheBoundsInPlainFigures) {
  EXPECT_TRUE(CheckNumber("0.5", 0, 1).ok());
  EXPECT_TRUE(CheckNumber("1", 0, 1).ok());
  EXPECT_EQ(CheckNumber("1.5", 0, 1).message(), "'1.5' is not in [0, 1]");
  EXPECT_FALSE(CheckNumber("nan", 0, 1).ok());
  EXPECT_FALSE(CheckNumber("x", 0, 1).ok());
}

TEST(OptionsTest, APositiveNumberIsAboveZero) {
  EXPECT_TRUE(CheckPositiveNumber("0.001").ok());
  EXPECT_EQ(CheckPositiveNumber("0").message(), "'0' must be > 0");
  EXPECT_FALSE(CheckPositiveNumber("-3").ok());
  EXPECT_FALSE(CheckPositiveNumber("inf").ok());
}

TEST(OptionsTest, APositiveDurationRefusesZero) {
  EXPECT_EQ(*ParsePositiveDurationOption("200ms"), absl::Milliseconds(200));
  EXPECT_THAT(ParsePositiveDurationOption("0s").status().message(), HasSubstr("longer than 0"));
  EXPECT_TRUE(ParseDurationOption("0s").ok());
  EXPECT_FALSE(ParsePositiveDurationOption("5").ok());  // no unit
}

}  // namespace
}  // namespace trainsup
