#include "support/checked_device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "core/backend.h"
#include "kernels/dispatch.h"
#include "mixtrain/cuda.h"
#include "mixtrain/error.h"

namespace mixtrain::testing {
namespace {

constexpr uintptr_t kTag = uintptr_t{1} << 62;

void* untag(const void* p) {
  const auto bits = reinterpret_cast<uintptr_t>(p);
  MT_CHECK(p == nullptr || (bits & kTag) != 0, "checked device: ", p, " is not a checked-device address");
  return reinterpret_cast<void*>(bits & ~kTag);
}

class CheckedBackend final : public Backend {
 public:
  const char* name() const override { return "checked"; }

  void* allocate(size_t nbytes, Stream) override {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + memory::kAlignment - 1) / memory::kAlignment * memory::kAlignment;
    void* p = std::aligned_alloc(memory::kAlignment, rounded);
    MT_CHECK(p != nullptr, "checked device: out of memory allocating ", nbytes, " bytes");
    MT_CHECK((reinterpret_cast<uintptr_t>(p) & kTag) == 0, "checked device: host address ", p, " already has the tag bit");
    std::lock_guard lock(mu_);
    live_.insert(p);
    ++stats_.allocations;
    ++stats_.system_allocations;
    stats_.current_bytes += static_cast<int64_t>(nbytes);
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kTag);
  }
  void deallocate(void* ptr, size_t nbytes, Stream) override {
    if (ptr == nullptr) return;
    void* host = untag(ptr);
    std::lock_guard lock(mu_);
    MT_CHECK(live_.erase(host) == 1, "checked device: freeing ", ptr, ", which is not a live block");
    std::free(host);
    ++stats_.frees;
    stats_.current_bytes -= static_cast<int64_t>(nbytes);
  }
  memory::Stats stats(Device) override {
    std::lock_guard lock(mu_);
    return stats_;
  }
  void reset_peak(Device) override {
    std::lock_guard lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void empty_cache(Device) override {}

  void copy_to_host(void* host_dst, const void* src, size_t nbytes, Device) override {
    if (nbytes != 0) std::memcpy(host_dst, untag(src), nbytes);
  }
  void copy_from_host(void* dst, const void* host_src, size_t nbytes, Device) override {
    if (nbytes != 0) std::memcpy(untag(dst), host_src, nbytes);
  }
  void synchronize(Device) override {}
  void* host_address(void* ptr, Device) const override { return untag(ptr); }

 private:
  std::mutex mu_;
  memory::Stats stats_;
  // The host addresses of the live blocks: double frees are caught, and the blocks stay reachable
  // for LeakSanitizer, which does not recognise the tagged pointers the tensors hold.
  std::unordered_set<void*> live_;
};

void register_checked_kernels(kernels::Registry& registry) {
  // Every kernel the CPU has, run through host_address.
  kernels::for_each_table([](kernels::DispatchTableBase& table, void* r) {
    static_cast<kernels::Registry*>(r)->alias(table, kCPU);
  }, &registry);
}

// Installed before main when the run asks for it, so that every test's tensors land on it:
// "checked" (this file's device) or "cuda" (the first GPU, in CUDA builds on a machine with one).
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
  set_default_device(checked_device());
  return checked_device();
}();

}  // namespace

Device checked_device() {
  static const Device device = [] {
    static auto* backend = new CheckedBackend();  // leaked: storages may be freed during exit
    register_backend(kPrivateUse1, backend);
    kernels::register_kernels(kPrivateUse1, &register_checked_kernels);
    return Device(kPrivateUse1);
  }();
  return device;
}

Device test_device() { return installed_default.value_or(Device{}); }

}  // namespace mixtrain::testing
