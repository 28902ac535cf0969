#include "support/checked_device.h"

#include <cstdlib>
#include <optional>
#include <string_view>

#include "mixtrain/cuda.h"
#include "mixtrain/error.h"

namespace mixtrain::testing {
namespace {

// Installed before main when the run asks for it, so that every test's tensors land on it.
const std::optional<Device> installed_default = []() -> std::optional<Device> {
  const char* env = std::getenv("MIXTRAIN_TEST_DEVICE");
  if (env == nullptr || std::string_view(env).empty() || std::string_view(env) == "cpu") return std::nullopt;
  const std::string_view name(env);
  MT_CHECK(name == "checked" || name == "cuda", "MIXTRAIN_TEST_DEVICE: expected cpu, checked or cuda, got '",
           detail::escape_untrusted(name.substr(0, 32)), "'");
  if (name == "cuda") {
    MT_CHECK(cuda::is_available(), "MIXTRAIN_TEST_DEVICE=cuda: ", cuda::unavailable_reason());
    set_default_device(Device(kCUDA, 0));
    return Device(kCUDA, 0);
  }
  // Asking for the checked device as the test device turns it on (before main: no other thread yet).
  ::setenv(kCheckedDeviceEnv, "1", /*overwrite=*/1);
  set_default_device(checked_device());
  return checked_device();
}();

}  // namespace

Device checked_device() { return parse_device("checked"); }

Device test_device() { return installed_default.value_or(Device{}); }

}  // namespace mixtrain::testing
