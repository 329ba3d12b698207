// The environment switches' parsing (src/common/env_switch.h).
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/env_switch.h"

using hopperkit::env_int;
using hopperkit::env_is;
using hopperkit::env_set;

namespace {
constexpr const char* kName = "HOPPERKIT_TEST_ENV_SWITCH";
void set(const char* v) { ASSERT_EQ(setenv(kName, v, 1), 0); }
void unset() { ASSERT_EQ(unsetenv(kName), 0); }
}  // namespace

TEST(EnvSwitch, IntegerWithFallbackAndRange) {
  unset();
  EXPECT_EQ(env_int(kName, 4, 1, 4), 4);  // unset
  set("");
  EXPECT_EQ(env_int(kName, 4, 1, 4), 4);  // empty
  set("2");
  EXPECT_EQ(env_int(kName, 4, 1, 4), 2);
  set("0");
  EXPECT_EQ(env_int(kName, 4, 1, 4), 4);  // below the range
  set("5");
  EXPECT_EQ(env_int(kName, 4, 1, 4), 4);  // above the range
  set("-3");
  EXPECT_EQ(env_int(kName, 7), -3);       // no range: any int
  set("3x");
  EXPECT_EQ(env_int(kName, 4, 1, 4), 4);  // not a whole integer
  set("abc");
  EXPECT_EQ(env_int(kName, 0, 1), 0);
  set("99999999999999999999");
  EXPECT_EQ(env_int(kName, 1), 1);        // out of long's range
  unset();
}

TEST(EnvSwitch, SetAndExactValue) {
  unset();
  EXPECT_FALSE(env_set(kName));
  EXPECT_FALSE(env_is(kName, "one"));
  set("");
  EXPECT_TRUE(env_set(kName));
  EXPECT_FALSE(env_is(kName, "one"));
  set("one");
  EXPECT_TRUE(env_is(kName, "one"));
  EXPECT_FALSE(env_is(kName, "on"));
  EXPECT_FALSE(env_is(kName, "one "));
  unset();
}
