// The address an elected trainsupd proclaims (daemon/ha_server.h,
// --advertise-address).
#include "daemon/ha_server.h"

#include <gtest/gtest.h>

namespace trainsup {
namespace {

TEST(AdvertisedAddressTest, DefaultsToTheAddressBound) {
  EXPECT_EQ(*AdvertisedAddress("", "127.0.0.1:7411"), "127.0.0.1:7411");
  // A wildcard bound is returned as is (trainsupd warns that it cannot be followed).
  EXPECT_EQ(*AdvertisedAddress("", "0.0.0.0:7411"), "0.0.0.0:7411");
}

TEST(AdvertisedAddressTest, AHostTakesThePortBound) {
  EXPECT_EQ(*AdvertisedAddress("node1.example", "0.0.0.0:7411"), "node1.example:7411");
  EXPECT_EQ(*AdvertisedAddress("10.0.0.5", "0.0.0.0:7411"), "10.0.0.5:7411");
  EXPECT_EQ(*AdvertisedAddress("[fd00::5]", "[::]:7411"), "[fd00::5]:7411");
  EXPECT_EQ(*AdvertisedAddress("node1.example:8411", "0.0.0.0:7411"), "node1.example:8411");
}

TEST(AdvertisedAddressTest, NoClientCanDialAWildcardOrPortZero) {
  EXPECT_FALSE(AdvertisedAddress("0.0.0.0", "0.0.0.0:7411").ok());
  EXPECT_FALSE(AdvertisedAddress("[::]:7411", "0.0.0.0:7411").ok());
  EXPECT_FALSE(AdvertisedAddress("node1:0", "0.0.0.0:7411").ok());
  EXPECT_FALSE(AdvertisedAddress("node1:x", "0.0.0.0:7411").ok());
}

}  // namespace
}  // namespace trainsup
