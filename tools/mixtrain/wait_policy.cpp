// The tool's default OpenMP wait policy (wait_policy.h).
#include "wait_policy.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace mixtrain::cli {

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached when the exec failed (no /proc, say): carry on with the policy already loaded, and
  // say so in wait_policy() by removing the variable again.
  unsetenv("OMP_WAIT_POLICY");
}

const char* wait_policy() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return p;
  if (const char* s = std::getenv("GOMP_SPINCOUNT")) {
    static const std::string spin = std::string("spincount=") + s;
    return spin.c_str();
  }
  return "default";
}

}  // namespace mixtrain::cli
