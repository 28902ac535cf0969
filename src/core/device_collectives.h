// src/core/device_collectives.h (internal): collectives between processes on tensors in device
// memory, one implementation per device type, registered by that type's backend
// (docs/notes/backends.md; CUDA's is NCCL, src/backends/cuda/collectives_nccl.cpp).
//
// Why in core: nothing above a backend touches device memory (core/backend.h), and a reduction over
// a GPU's memory is a backend's business like a kernel is. The layers above see only this interface:
// data-parallel training (src/dist/ddp.cpp) bootstraps a communicator through it
// (src/dist/device_bootstrap.h) and reduces its gradient buckets with it when the parameters' device
// has one, and ZeRO-1 (src/dist/zero.cpp) all-gathers its updated parameters with it; the ProcessGroup
// (MPI, host memory) stays the channel for everything else, including the bootstrap's id.
//
// Bootstrap, as NCCL's: one rank calls create_unique_id() and sends the bytes to the others by its own
// means (DDP broadcasts them over its ProcessGroup as a uint8 CPU tensor); then every rank calls
// connect(id, rank, size, device), which returns when all `size` ranks have joined.
//
// Ordering: a communicator's collectives are enqueued on the backend's stream of its device, after
// the work queued there before (the kernels that wrote the tensor) and before the work queued after,
// and return without waiting for the device: no host synchronisation. As with the ProcessGroup,
// every rank must issue the same sequence (kind, dtype, element count) from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/device.h"
#include "mixtrain/tensor.h"

namespace mixtrain {

// The reduction of a device all-reduce. Apart from dist::ReduceOp (sum, avg, max), which belongs to the
// dist layer that core cannot see, and holds only what device collectives offer.
enum class DeviceReduceOp : uint8_t { kSum, kAvg };

// "sum", "avg".
std::string_view to_string(DeviceReduceOp op);

// One rank's end of a communicator on one device. The public calls check their arguments (the same
// checks on every rank, before anything is enqueued, so that every rank throws the same error), bump
// the tensor's version counter as every in-place write does, and hand the work to the backend.
class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device device() const { return device_; }

  // Sum (or average) over all ranks, in place, element by element. `tensor`: contiguous, on device(),
  // the same shape and dtype on every rank; float32, float64, bfloat16 or float16 with kSum or kAvg,
  // int32 or int64 with kSum only (an average would be truncated: sum and divide). The arithmetic is
  // the backend's (NCCL's order and, for 16-bit dtypes, its rounding); DDP reduces fp32 with kSum and
  // divides by the world size itself.
  void all_reduce(const Tensor& tensor, DeviceReduceOp op = DeviceReduceOp::kSum);
  // Root's bytes into every rank's tensor: contiguous, on device(), any dtype (moved as bytes), the
  // same shape and dtype on every rank.
  void broadcast(const Tensor& tensor, int root = 0);
  // Every rank's `input` back to back into every rank's `output`, in rank order: output[r*n, (r+1)*n)
  // = rank r's input, n = input.numel(). Both contiguous, on device(), of one dtype (any: moved as
  // bytes), output.numel() == size() * n; the same n and dtype on every rank. `input` is read only
  // (it may not overlap `output`, except as output's own rank()-th block, which then holds it already).
  void all_gather(const Tensor& input, const Tensor& output);

 protected:
  DeviceCommunicator(int rank, int size, Device device);
  // Called once the arguments are checked.
  virtual void all_reduce_impl(const Tensor& tensor, DeviceReduceOp op) = 0;
  virtual void broadcast_impl(const Tensor& tensor, int root) = 0;
  virtual void all_gather_impl(const Tensor& input, const Tensor& output) = 0;

 private:
  int rank_;
  int size_;
  Device device_;
};

// A device type's collectives: makes ids and connects communicators.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // What they are, for messages and DistributedDataParallel::reduction_backend(): "nccl".
  virtual std::string name() const = 0;
  // A new id naming one communicator (opaque bytes, 128 for NCCL): made on one rank, sent to the others.
  virtual std::vector<uint8_t> create_unique_id() = 0;
  // Joins the communicator named by `id` as rank `rank` of `size` (0 <= rank < size), on `device` (of
  // this collectives' device type); blocks until every rank has joined. Throws mt::Error for bad
  // arguments and, naming the backend's error, when the backend cannot connect.
  std::unique_ptr<DeviceCommunicator> connect(std::span<const uint8_t> id, int rank, int size, Device device);

 protected:
  // Called once the arguments are checked.
  virtual std::unique_ptr<DeviceCommunicator> connect_impl(std::span<const uint8_t> id, int rank, int size,
                                                           Device device) = 0;
};

// The collectives of `type`: those registered for it, else the ones its backend folder builds in (CUDA's
// NCCL in builds with NCCL), else nullptr.
DeviceCollectives* device_collectives(DeviceType type);
// The same, or an mt::Error saying that `type` has none and why (for CUDA: this build has no NCCL).
DeviceCollectives& require_device_collectives(DeviceType type);
// Installs `collectives` for `type`, replacing an earlier registration or the built-in ones; nullptr
// removes the registration (the built-in ones, if any, are found again). The object must outlive every
// communicator it connects. A device defined outside the library, or a test (the DDP and ZeRO-1 tests
// register host-staged ones for the checked device, tests/support/host_staged_collectives.h), calls it
// before wrapping a model.
void register_device_collectives(DeviceType type, DeviceCollectives* collectives);

}  // namespace mixtrain
