// The tool's default OpenMP wait policy (wait_policy.h).
#include "wait_policy.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace mixtrain::cli {

namespace {

constexpr const char* kChoiceVar = "MIXTRAIN_WAIT_POLICY_CHOICE";  // set by the tool for its exec'd self

// The first line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ..."), or "".
std::string read_cpu_line() {
  std::ifstream in("/proc/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

// {busy, total} jiffies of a "cpu" line; {0, 0} when it is not one.
std::pair<uint64_t, uint64_t> jiffies(const std::string& line) {
  std::istringstream in(line);
  std::string label;
  in >> label;
  if (label != "cpu") return {0, 0};
  std::vector<uint64_t> v;
  uint64_t x = 0;
  while (v.size() < 8 && in >> x) v.push_back(x);
  if (v.size() < 4) return {0, 0};
  uint64_t total = 0;
  for (uint64_t j : v) total += j;
  const uint64_t idle = v[3] + (v.size() > 4 ? v[4] : 0);  // idle + iowait
  return {total - idle, total};
}

}  // namespace

double busy_cores(const std::string& before, const std::string& after) {
  const auto [busy0, total0] = jiffies(before);
  const auto [busy1, total1] = jiffies(after);
  if (total0 == 0 || total1 <= total0 || busy1 < busy0) return 0.0;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  // Jiffies count every core: total grows by cores x elapsed ticks.
  return static_cast<double>(busy1 - busy0) / static_cast<double>(total1 - total0) *
         static_cast<double>(cores > 0 ? cores : 1);
}

void apply_default_wait_policy(char** argv) {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    // The user's choice, or this tool's own choice when it is the exec'd second run.
    const char* choice = std::getenv(kChoiceVar);
    const bool ours = choice != nullptr && policy != nullptr && std::string(choice) == "auto:passive" &&
                      std::string(policy) == "passive" && std::getenv("GOMP_SPINCOUNT") == nullptr;
    if (!ours) unsetenv(kChoiceVar);
    return;
  }
  const std::string before = read_cpu_line();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string after = read_cpu_line();
  if (busy_cores(before, after) < 0.5) {
    setenv(kChoiceVar, "auto:spin", 1);
    return;
  }
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv(kChoiceVar, "auto:passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached when the exec failed (no /proc, say): carry on with the policy already loaded.
  unsetenv("OMP_WAIT_POLICY");
  setenv(kChoiceVar, "auto:spin", 1);
}

std::string wait_policy() {
  if (const char* choice = std::getenv(kChoiceVar)) return choice;  // set only by apply_default_wait_policy
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) return policy;
  if (const char* s = std::getenv("GOMP_SPINCOUNT")) return std::string("spincount=") + s;
  return "default";
}

}  // namespace mixtrain::cli
