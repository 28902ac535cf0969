// The device-collectives registry and the argument checks every backend's communicator shares
// (core/device_collectives.h).
#include "core/device_collectives.h"

#include <array>
#include <atomic>

#include "core/backend_descriptor.h"
#include "mixtrain/error.h"

namespace mixtrain {

std::string_view to_string(DeviceReduceOp op) {
  switch (op) {
    case DeviceReduceOp::kSum: return "sum";
    case DeviceReduceOp::kAvg: return "avg";
  }
  return "?";
}

namespace {

// Per device type: whether a registration replaced the built-in collectives, and what it installed.
// Atomics, so that a lookup racing a registration reads one or the other.
struct Slot {
  std::atomic<bool> registered{false};
  std::atomic<DeviceCollectives*> collectives{nullptr};
};
constinit std::array<Slot, kNumDeviceTypes> slots{};

Slot& slot_of(DeviceType type) {
  const auto i = static_cast<size_t>(type);
  MT_CHECK(i < slots.size(), "device collectives: unknown device type ", static_cast<int>(i));
  return slots[i];
}

void check_tensor(const char* what, const Tensor& t, const DeviceCommunicator& c) {
  MT_CHECK(t.defined(), "device collectives: ", what, " of an undefined tensor");
  MT_CHECK(t.device() == c.device(), "device collectives: ", what, " of a tensor on ", t.device(),
           " through a communicator on ", c.device(), " (", describe(t), ")");
  MT_CHECK(t.is_contiguous(), "device collectives: ", what, " needs a contiguous tensor, got ", describe(t),
           " (reduce a .contiguous() copy and copy it back)");
}

}  // namespace

DeviceCommunicator::DeviceCommunicator(int rank, int size, Device device) : rank_(rank), size_(size), device_(device) {}

void DeviceCommunicator::all_reduce(const Tensor& tensor, DeviceReduceOp op) {
  check_tensor("all_reduce", tensor, *this);
  const DType d = tensor.dtype();
  const bool floating = d == kFloat32 || d == kFloat64 || d == kBFloat16 || d == kFloat16;
  const bool integer = d == kInt32 || d == kInt64;
  MT_CHECK(floating || integer, "device collectives: all_reduce of ", d,
           " is not supported (float32, float64, bfloat16, float16, int32, int64)");
  MT_CHECK(floating || op == DeviceReduceOp::kSum, "device collectives: all_reduce avg of an integer tensor (", d,
           ") would truncate the quotient: sum and divide");
  tensor.bump_version();
  all_reduce_impl(tensor, op);
}

void DeviceCommunicator::broadcast(const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor, *this);
  MT_CHECK(root >= 0 && root < size_, "device collectives: broadcast from rank ", root, " of a communicator of ", size_,
           " rank", size_ == 1 ? "" : "s");
  tensor.bump_version();
  broadcast_impl(tensor, root);
}

void DeviceCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  check_tensor("all_gather", input, *this);
  check_tensor("all_gather", output, *this);
  MT_CHECK(input.dtype() == output.dtype(), "device collectives: all_gather of ", input.dtype(), " into ",
           output.dtype(), ": input and output have one dtype (the bytes are moved, not converted)");
  const int64_t n = input.numel();
  MT_CHECK(output.numel() == n * size_, "device collectives: all_gather of ", n, " elements per rank over ", size_,
           " rank", size_ == 1 ? "" : "s", " needs an output of ", n * size_, " elements, got ", describe(output));
  if (input.shares_storage(output)) {
    // In place only as NCCL allows it: the input is this rank's block of the output.
    const int64_t in = input.storage_offset(), out = output.storage_offset();
    const bool apart = in + n <= out || out + n * size_ <= in;
    MT_CHECK(apart || in == out + static_cast<int64_t>(rank_) * n, "device collectives: all_gather's input overlaps ",
             "its output other than as this rank's block (rank ", rank_, ": output elements [", rank_ * n, ", ",
             (rank_ + 1) * n, "))");
  }
  output.bump_version();
  all_gather_impl(input, output);
}

std::unique_ptr<DeviceCommunicator> DeviceCollectives::connect(std::span<const uint8_t> id, int rank, int size,
                                                               Device device) {
  MT_CHECK(size >= 1 && rank >= 0 && rank < size, "device collectives (", name(), "): rank ", rank, " of ", size,
           " is not a rank of a communicator of that size");
  MT_CHECK(!id.empty(), "device collectives (", name(), "): connect with an empty unique id");
  std::unique_ptr<DeviceCommunicator> c = connect_impl(id, rank, size, device);
  MT_INTERNAL_ASSERT(c != nullptr && c->rank() == rank && c->size() == size && c->device() == device,
                     "device collectives (", name(), "): connect returned a communicator of another rank or device");
  return c;
}

DeviceCollectives* device_collectives(DeviceType type) {
  Slot& s = slot_of(type);
  if (s.registered.load(std::memory_order_acquire)) return s.collectives.load(std::memory_order_acquire);
  const BuiltinBackend* b = builtin_backend_of(type);
  // The built-in ones need the backend itself in this build: a folder whose backend is off has none.
  if (b == nullptr || b->backend == nullptr || b->collectives == nullptr) return nullptr;
  return b->collectives();
}

DeviceCollectives& require_device_collectives(DeviceType type) {
  DeviceCollectives* c = device_collectives(type);
  if (c != nullptr) return *c;
  const BuiltinBackend* b = builtin_backend_of(type);
  const char* why = b != nullptr ? b->descriptor->collectives_absent_reason : nullptr;
  MT_FAIL("device collectives: none for device type ", type, ": ",
          why != nullptr ? why : "its backend registers none (core/device_collectives.h, register_device_collectives)");
}

void register_device_collectives(DeviceType type, DeviceCollectives* collectives) {
  Slot& s = slot_of(type);
  s.collectives.store(collectives, std::memory_order_release);
  s.registered.store(collectives != nullptr, std::memory_order_release);
}

}  // namespace mixtrain
