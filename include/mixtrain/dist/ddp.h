// mixtrain/dist/ddp.h: DistributedDataParallel, PyTorch's semantics over a ProcessGroup
// (docs/distributed.md).
//
//   dist::DistributedDataParallel ddp(model, dist::world());   // parameters/buffers from rank 0
//   loss = F::cross_entropy(model(x_shard), y_shard);        // the module itself runs forward
//   loss.backward();                                           // buckets are all-reduced as grads arrive
//   ddp.finish_gradient_sync();                                // (done by the last hook already; needed
//   opt.step();                                                //  only when some parameter got no grad)
//
// - At construction every rank checks that all ranks hold the same parameter list (count, names,
//   shapes, dtypes) and takes rank 0's parameter and buffer values.
// - Gradients are reduced in buckets of about bucket_cap_mb, filled in reverse parameter order (the
//   order backward produces them). A post-accumulate-grad hook copies each gradient into its
//   bucket; a full bucket is all-reduced asynchronously while backward goes on, buckets always in
//   index order so that every rank issues the same collectives in the same order.
// - Buckets are fp32 whatever the gradients' dtype: 16-bit gradients are widened exactly, summed in
//   fp32 over the ranks, divided by the world size in fp32 (exact for powers of two) and rounded
//   once back into .grad: no overflow of a 16-bit sum, no double rounding.
// - When backward has produced every gradient, the last hook waits for the buckets and writes the
//   averages into .grad; so when backward() returns, every rank holds the same averaged gradient,
//   and the GradScaler's inf check (which runs after) sees an inf produced on any rank: every rank
//   skips the same steps and keeps the same scale.
// - Devices: the parameters may live on any one device. The buckets live there too, and are reduced
//   by one of two paths (ReductionPath below; reduction_path() says which was taken):
//   * device collectives, when the device's backend registered some (CUDA with NCCL) and the group
//     has more than one rank: at construction rank 0 makes a unique id, broadcasts it over the
//     process group, and every rank connects a communicator on the device; rank 0's parameters and
//     buffers are broadcast through it, and each full bucket is summed over the ranks in device
//     memory, enqueued on the device's stream after the kernels that filled it (no host wait);
//   * host staging otherwise (or with reduction = kProcessGroup): the process group reads host memory
//     (MPI), so each bucket has a host mirror: a full bucket is copied to the host, all-reduced there
//     and copied back, and parameters and buffers are broadcast through host copies. The sum and the
//     average are then the same operations in the same order as for a CPU model, bit for bit.
//   Either way the average is the fp32 sum divided by the world size in fp32, by the same kernel.
// - no_sync(): while the guard lives, backward accumulates gradients locally and reduces nothing;
//   the first backward after it reduces the accumulated sums (gradient accumulation).
// - A parameter that gets no gradient in a backward is an error naming it (every rank raises it:
//   the model and the graph are the same everywhere), unless find_unused_parameters: then its
//   slot counts as zero on this rank, and a parameter no rank used keeps its .grad untouched.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/dist/process_group.h"
#include "mixtrain/nn/module.h"

namespace mixtrain {
class DeviceCommunicator;  // the library's device collectives (internal)
}

namespace mixtrain::dist {

// How the gradient buckets travel between the ranks (docs/distributed.md, "Models on a device"); ZeRO-1's
// parameter all-gather takes the same choice (ZeroOptions::gather, mixtrain/dist/zero.h).
enum class ReductionPath : uint8_t {
  // An option only: kDeviceCollectives when the parameters are on a device whose backend has device
  // collectives (CUDA in builds with NCCL) and the group has more than one rank; else kProcessGroup.
  kAuto,
  // Through the ProcessGroup, in host memory: in place for a CPU model, through a host mirror of each
  // bucket for a model on a device (host-staged). As an option: forces host staging.
  kProcessGroup,
  // In device memory, by the device's collectives (NCCL for CUDA), on the device's stream; the
  // communicator is bootstrapped over the ProcessGroup. As an option: required (an mt::Error naming
  // why when the device has none) and taken even by a group of one rank.
  kDeviceCollectives,
};

// "auto", "process group", "device collectives".
std::string_view to_string(ReductionPath path);

struct DdpOptions {
  double bucket_cap_mb = 25.0;          // fp32 bytes per bucket, in MiB (a larger tensor gets a bucket alone)
  bool find_unused_parameters = false;  // see above
  bool broadcast_buffers = true;        // take rank 0's buffers at construction
  // false: every bucket is all-reduced at the end of backward, none during it (the baseline that
  // shows how much communication the overlap hides; bench/dist).
  bool overlap = true;
  // Which path the buckets take (above); every rank must take the same (checked at construction).
  ReductionPath reduction = ReductionPath::kAuto;
};

// Communication counters since construction (or reset_stats): what the overlap hides.
struct DdpStats {
  int64_t reductions = 0;       // backward passes whose gradients were reduced
  int64_t buckets_reduced = 0;  // bucket all-reduces issued
  int64_t bytes_reduced = 0;    // fp32 bytes all-reduced
  double wait_ms = 0;           // time backward's end spent waiting for reductions still in flight
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }
  const DdpOptions& options() const { return options_; }

  // The buckets: parameter indices (into module.parameters()) per bucket, in reduction order.
  const std::vector<std::vector<int64_t>>& bucket_assignment() const { return bucket_params_; }

  // The path the buckets take (kProcessGroup or kDeviceCollectives, never kAuto), and what reduces
  // them: the device collectives' name ("nccl") or the process group's backend ("mpi", "single").
  ReductionPath reduction_path() const { return path_; }
  const std::string& reduction_backend() const { return reduction_backend_; }

  // Waits for this backward's reductions and writes the averaged gradients (a no-op when the last
  // gradient hook has done so, or when nothing is pending). Throws, naming them, when parameters got
  // no gradient and find_unused_parameters is off.
  void finish_gradient_sync();

  // While a NoSync lives, backward reduces nothing and gradients accumulate locally.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_->sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  const DdpStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket;
  void on_grad_ready(int64_t param);
  void launch_ready_buckets();
  void launch(Bucket& b);
  void start_iteration();

  nn::Module* module_;
  ProcessGroup* group_;
  DdpOptions options_;
  ReductionPath path_ = ReductionPath::kProcessGroup;
  std::string reduction_backend_;
  std::unique_ptr<DeviceCommunicator> comm_;  // with kDeviceCollectives
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<uint64_t> hook_ids_;
  std::vector<std::vector<int64_t>> bucket_params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<int64_t> bucket_of_;   // per parameter
  std::vector<int64_t> offset_of_;   // per parameter: element offset in its bucket
  std::vector<char> ready_;          // per parameter, this backward
  int64_t pending_ = 0;              // parameters not yet ready this backward
  int64_t next_launch_ = 0;          // the next bucket to all-reduce
  bool in_iteration_ = false;
  bool sync_ = true;
  DdpStats stats_;
};

}  // namespace mixtrain::dist
