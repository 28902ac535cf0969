// The tool's load reading for its OpenMP wait policy (tools/mixtrain/wait_policy.h): busy cores
// from two /proc/stat "cpu" lines, and the refusals of lines that are not one.
#include <gtest/gtest.h>

#include <unistd.h>

#include "wait_policy.h"

namespace {

using mixtrain::cli::busy_cores;

double cores() { return static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN)); }

TEST(WaitPolicy, BusyCoresFromTwoReadings) {
  // 200 jiffies passed over all cores, 100 of them busy (user + system): half the machine.
  EXPECT_DOUBLE_EQ(busy_cores("cpu  100 0 100 800 0 0 0 0 0 0", "cpu  150 0 150 900 0 0 0 0 0 0"), 0.5 * cores());
  // iowait counts as idle; nice, irq, softirq and steal as busy.
  EXPECT_DOUBLE_EQ(busy_cores("cpu 1 0 0 9 0 0 0 0", "cpu 1 0 0 59 50 0 0 0"), 0.0);
  EXPECT_DOUBLE_EQ(busy_cores("cpu 1 0 0 9 0 0 0 0", "cpu 1 10 0 69 0 10 10 10"), 0.4 * cores());
  // An idle machine.
  EXPECT_DOUBLE_EQ(busy_cores("cpu 5 0 5 1000 0", "cpu 5 0 5 1400 0"), 0.0);
}

TEST(WaitPolicy, UnreadableLinesCountAsIdle) {
  EXPECT_EQ(busy_cores("", "cpu 1 1 1 1"), 0.0);
  EXPECT_EQ(busy_cores("cpu0 1 1 1 1", "cpu0 2 2 2 2"), 0.0);       // a per-core line
  EXPECT_EQ(busy_cores("cpu 1 1", "cpu 2 2"), 0.0);                 // too short
  EXPECT_EQ(busy_cores("cpu 9 9 9 9", "cpu 1 1 1 1"), 0.0);         // time went backwards
  EXPECT_EQ(busy_cores("cpu 1 1 1 1", "cpu 1 1 1 1"), 0.0);         // no time passed
  EXPECT_EQ(busy_cores("cpu x y z w", "cpu 1 2 3 4"), 0.0);         // not numbers
}

TEST(WaitPolicy, ReportsTheUsersChoice) {
  // This test process never ran apply_default_wait_policy: the environment's policy is reported.
  const char* saved = std::getenv("OMP_WAIT_POLICY");
  setenv("OMP_WAIT_POLICY", "active", 1);
  EXPECT_EQ(mixtrain::cli::wait_policy(), "active");
  if (saved) setenv("OMP_WAIT_POLICY", saved, 1); else unsetenv("OMP_WAIT_POLICY");
}

}  // namespace
