// The CUDA backend's device collectives (core/device_collectives.h) over NCCL, built with NCCL only
// (cmake/Nccl.cmake). Each collective is enqueued on the device's one stream (cuda_backend.h), so it
// runs after the kernels that wrote its tensor (DDP's bucket copies) and before the ones queued after
// it (the division by the world size), without the host waiting: the same ordering as any kernel.
//
// Unverified on a GPU so far: tests/cuda/nccl_smoke.cpp (scripts/gpu-check.sh, phase nccl) runs a world
// of one; without a GPU it is compiled and reviewed only.
#include <nccl.h>

#include <cstring>
#include <exception>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "core/device_collectives.h"
#include "mixtrain/error.h"

namespace mixtrain::cuda {

namespace {

// Throws "nccl: <what><where>: <NCCL's error string>; <NCCL's last error text>".
void nccl_check(ncclResult_t status, const char* what, const std::string& where) {
  if (status == ncclSuccess) [[likely]] return;
  const char* last = ncclGetLastError(nullptr);
  MT_FAIL("nccl: ", what, where, ": ", ncclGetErrorString(status), last != nullptr && last[0] != '\0' ? "; " : "",
          last != nullptr ? last : "");
}

// " on cuda:N (rank r of n)", for the messages of a communicator's calls.
std::string on(Device device, int rank, int size) {
  return detail::concat(" on ", device, " (rank ", rank, " of ", size, ")");
}

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
    case kBFloat16: return ncclBfloat16;
    case kFloat16: return ncclFloat16;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    default: break;
  }
  // DeviceCommunicator::all_reduce refuses every other dtype before it gets here.
  MT_INTERNAL_ASSERT(false, "nccl: no NCCL type for ", d);
  return ncclFloat32;
}

class NcclCommunicator final : public DeviceCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, Device device)
      : DeviceCommunicator(rank, size, device), comm_(comm) {}

  ~NcclCommunicator() override {
    // Destroying a communicator other ranks still use can wait for them; while an exception unwinds,
    // or after an error, the job is failing: abort it locally instead of waiting.
    try {
      DeviceGuard guard(device());
      if (failed_ || std::uncaught_exceptions() > 0) {
        ncclCommAbort(comm_);
        return;
      }
      // Work still queued reads or writes buffers that may be freed after this: let it finish first.
      cudaStreamSynchronize(stream(device()));
      ncclCommDestroy(comm_);
    } catch (...) {  // a destructor does not throw; the device is failing anyway
    }
  }

 protected:
  void all_reduce_impl(const Tensor& t, DeviceReduceOp op) override {
    // NCCL's ncclAvg is its own arithmetic (a pre-scaling by 1/size, or a division of the sum);
    // DDP sums and divides itself.
    const ncclRedOp_t nop = op == DeviceReduceOp::kAvg ? ncclAvg : ncclSum;
    enqueue("ncclAllReduce", [&](cudaStream_t s) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_dtype(t.dtype()), nop,
                           comm_, s);
    });
  }
  void broadcast_impl(const Tensor& t, int root) override {
    enqueue("ncclBroadcast", [&](cudaStream_t s) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, s);
    });
  }
  void all_gather_impl(const Tensor& input, const Tensor& output) override {
    // Bytes, whatever the dtype: rank r's input.nbytes() land at byte r * input.nbytes() of the output.
    // An input that is the output's own block is NCCL's in-place form (the shared checks allow no
    // other overlap). Compiled only until a GPU runs tests/cuda/nccl_smoke.cpp.
    enqueue("ncclAllGather", [&](cudaStream_t s) {
      return ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclUint8, comm_, s);
    });
  }

 private:
  // Checks for an error a previous collective left behind (NCCL reports those asynchronously), then
  // enqueues `call` on the device's stream.
  template <typename Call>
  void enqueue(const char* what, Call call) {
    DeviceGuard guard(device());
    ncclResult_t async = ncclSuccess;
    check_result(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) check_result(async, "an earlier collective");
    check_result(call(stream(device())), what);
  }
  void check_result(ncclResult_t status, const char* what) {
    if (status == ncclSuccess) [[likely]] return;
    failed_ = true;
    nccl_check(status, what, on(device(), rank(), size()));
  }

  ncclComm_t comm_;
  bool failed_ = false;
};

class NcclCollectives final : public DeviceCollectives {
 public:
  std::string name() const override { return "nccl"; }

  std::vector<uint8_t> create_unique_id() override {
    ncclUniqueId id;
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "");
    std::vector<uint8_t> bytes(sizeof(id.internal));
    std::memcpy(bytes.data(), id.internal, bytes.size());
    return bytes;
  }

 protected:
  std::unique_ptr<DeviceCommunicator> connect_impl(std::span<const uint8_t> id, int rank, int size,
                                                   Device device) override {
    require_device(device);
    ncclUniqueId uid;
    MT_CHECK(id.size() == sizeof(uid.internal), "nccl: a unique id is ", sizeof(uid.internal), " bytes, got ",
             id.size(), " (made by other collectives than NCCL's?)");
    std::memcpy(uid.internal, id.data(), id.size());
    // NCCL binds the communicator to the current device; the stream is made first so that creating
    // it does not happen inside NCCL's setup.
    (void)stream(device);
    DeviceGuard guard(device);
    ncclComm_t comm = nullptr;
    nccl_check(ncclCommInitRank(&comm, size, uid, rank), "ncclCommInitRank", on(device, rank, size));
    return std::make_unique<NcclCommunicator>(comm, rank, size, device);
  }
};

}  // namespace

DeviceCollectives& device_collectives() {
  static NcclCollectives* c = new NcclCollectives();  // leaked, as backend(): outlives every communicator
  return *c;
}

}  // namespace mixtrain::cuda
