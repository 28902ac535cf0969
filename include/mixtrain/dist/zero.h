// mixtrain/dist/zero.h: ZeRO stage 1, optimizer state sharded over the ranks of a data-parallel job
// (docs/distributed.md, "Sharded optimizer state").
//
//   dist::DistributedDataParallel ddp(model, dist::world());        // gradients averaged everywhere
//   dist::ZeroRedundancyOptimizer opt(named_params, dist::world(),
//       [](std::vector<optim::NamedParameter> shard) { return std::make_unique<optim::AdamW>(std::move(shard), o); });
//   loss.backward(); opt.step();                                    // or scaler.step(opt)
//
// With AdamW and fp32 masters every rank of plain DDP holds 16 bytes per parameter; most of it
// (masters 4, moments 8) is optimizer state that each rank computes identically. Here the
// parameters, in flat order (their order in the list, element by element), are cut into N contiguous
// ranges, one per rank: rank r of N owns elements [r*T/N, (r+1)*T/N) of the T in all, so the lengths
// differ by at most one. A parameter may straddle ranks. Each rank builds its optimizer (the factory's)
// over views of the elements it owns, so its masters and moments cover 1/N of the model; per rank,
// optimizer state shrinks to 1/N.
//
// A step: the gradients are the averaged ones that DDP left in every rank's .grad (the GradScaler's
// inf check and gradient clipping therefore see every gradient and agree on every rank); each rank
// updates the elements it owns with its optimizer, then the parameters are all-gathered so that every
// rank holds the whole updated model. The update of an element reads only that element's gradient,
// state and the group's hyperparameters, so each owner's update is bit for bit the one plain DDP
// makes: ZeRO-1 follows DDP's trajectory exactly. Stochastic rounding included (AdamW's for bf16
// weights without masters and for a bf16 second moment): each view draws its random bits at its
// elements' positions within the whole parameter (Optimizer::set_rounding_stream).
//
// Communication per step: DDP's all-reduce of the gradients, plus one all-gather of the parameters
// per parameter dtype, in that dtype (each rank's owned elements of it, padded to the longest rank's
// count). Gradients stay whole on every rank (sharding them is ZeRO stage 2).
// The all-gather takes one of two paths (ZeroOptions::gather; gather_path() says which), chosen as
// DDP chooses its reduction's (ReductionPath, mixtrain/dist/ddp.h):
//   * device collectives, when the parameters are on one device whose backend registered some (CUDA
//     with NCCL) and the group has more than one rank: construction bootstraps a communicator over
//     the process group (collective; rank 0's unique id broadcast), and each step gathers in device
//     memory, enqueued on the device's stream after the update (no host copy, no host wait);
//   * the process group otherwise (or with gather = kProcessGroup): through host memory, a host copy
//     each way for a model on a device.
// Either way the bytes are moved, never computed: the trajectory is the same, bit for bit.
//
// Restrictions: the factory must build one parameter group (every rank then has the same groups);
// the model must have at least as many parameter elements as there are ranks; every rank constructs
// it with the same parameter list (names, shapes, dtypes; checked).
//
// Collectives: construction, step()/step_scaled() (when not skipped), state_dict() and
// load_state_dict() are collective: every rank must call them in the same order. state_dict() gathers
// the optimizer state through the process group (host memory) whatever the path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::dist {

// A piece of saved optimizer state: elements [begin, end) of the parameter with flat index `param`,
// its update count, and its state tensors (PyTorch's keys, as optim::ParamState::named_tensors();
// "master" is the full fp32 master, never "master_low"), each 1-D with end - begin elements.
struct ZeroStatePiece {
  int64_t param = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

struct ZeroOptions {
  // How the updated parameters travel between the ranks (above): kAuto takes the device collectives
  // where the parameters' device has them and the group has more than one rank, else the process
  // group; kProcessGroup forces host staging; kDeviceCollectives requires the device collectives (an
  // mt::Error says why a device has none; cpu parameters, or parameters on several devices, are
  // refused) and takes them even with one rank. Every rank must take the same path (checked).
  ReductionPath gather = ReductionPath::kAuto;
};

class ZeroRedundancyOptimizer final : public optim::Optimizer {
 public:
  // Builds the optimizer of this rank's shard from views of the elements it owns (1-D, contiguous,
  // aliasing the parameters; named like their parameter, with "[begin:end]" appended when it covers
  // part of it).
  using LocalFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::NamedParameter>)>;

  ZeroRedundancyOptimizer(std::vector<optim::NamedParameter> params, ProcessGroup& group,
                          const LocalFactory& make_local, ZeroOptions options = {});
  ~ZeroRedundancyOptimizer() override;

  const char* name() const override { return local_->name(); }  // the local optimizer's ("AdamW")
  double lr(size_t group = 0) const override { return local_->lr(group); }
  void set_lr(size_t group, double lr) override { local_->set_lr(group, lr); }
  using optim::Optimizer::set_lr;

  ProcessGroup& group() const { return *group_; }
  const ZeroOptions& options() const { return options_; }
  // The path the parameter all-gather takes (kProcessGroup or kDeviceCollectives, never kAuto), and
  // what moves the bytes: the device collectives' name ("nccl") or the process group's backend ("mpi",
  // "single").
  ReductionPath gather_path() const { return path_; }
  const std::string& gather_backend() const { return gather_backend_; }
  // The optimizer of this rank's shard (its state is this rank's share of the whole state).
  optim::Optimizer& local_optimizer() { return *local_; }
  const optim::Optimizer& local_optimizer() const { return *local_; }

  // The partition: parameter elements in all, and the flat range [begin, end) rank r owns.
  int64_t total_elements() const { return total_; }
  std::pair<int64_t, int64_t> owned_range(int rank) const;
  // The range of rank `rank` of `world` over `total` elements: what owned_range() returns, for any
  // world size (a checkpoint written by another one).
  static std::pair<int64_t, int64_t> range_of(int64_t total, int64_t rank, int64_t world);

  // A whole-model state dict (every parameter's state, as a plain optimizer's state_dict() holds it),
  // gathered from every rank: collective, and it costs the whole state's memory on every rank while
  // it lives. For export and comparison; checkpoints save local_state_pieces() instead.
  optim::OptimizerStateDict state_dict() const override;
  // Takes a whole-model state dict (the same one on every rank: a plain optimizer's, or state_dict())
  // and keeps this rank's slices of it.
  void load_state_dict(const optim::OptimizerStateDict& state_dict) override;

  // This rank's state, one piece per parameter it owns part of: what a sharded checkpoint saves.
  std::vector<ZeroStatePiece> local_state_pieces() const;
  // Restores this rank's state from pieces saved under any partition (another world size included):
  // every element this rank owns must be covered by exactly one piece, with one update count per
  // parameter and the same state keys across a parameter's pieces; pieces that do not overlap this
  // rank's range are ignored. Validated before anything changes. Not collective. Group
  // hyperparameters are set separately (set_hyperparameters).
  void load_state_pieces(const std::vector<ZeroStatePiece>& pieces);

  // This rank's optimizer state (its shard).
  optim::StateBytes state_bytes() const override { return local_->state_bytes(); }
  void sync_masters_from_params() override { local_->sync_masters_from_params(); }
  void pack_masters() override { local_->pack_masters(); }
  bool has_packed_masters() const override { return local_->has_packed_masters(); }
  void release_masters() override { local_->release_masters(); }

 protected:
  void update(float inv_scale) override;
  void step_group(size_t g, float inv_scale) override;
  std::map<std::string, double> group_hyperparameters(size_t g) const override { return local_->hyperparameters(g); }
  void set_group_hyperparameters(size_t g, const std::map<std::string, double>& values) override {
    local_->set_hyperparameters(g, values);
  }

 private:
  // Elements [begin, end) of parameter `param`, owned by one rank; `view` aliases them (1-D).
  struct Slice {
    int64_t param = 0;
    int64_t begin = 0;
    int64_t end = 0;
    Tensor view;  // only for this rank's slices
  };
  // The parameters of one dtype as the all-gather moves them: each rank's slices back to back in a
  // chunk padded to the longest rank's count. Fixed by the partition: computed once.
  struct GatherPlan {
    DType dtype = kFloat32;
    int64_t chunk = 0;
    std::vector<std::vector<Slice>> by_rank;
  };
  std::vector<Slice> slices_of(int rank) const;
  void plan_gathers();
  void all_gather_parameters();

  ProcessGroup* group_;
  ZeroOptions options_;
  ReductionPath path_ = ReductionPath::kProcessGroup;
  std::string gather_backend_;
  std::unique_ptr<DeviceCommunicator> comm_;  // with kDeviceCollectives
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // flat offset of each parameter
  int64_t total_ = 0;
  std::vector<Slice> local_slices_;  // this rank's, in flat order, with views
  std::vector<GatherPlan> gather_plans_;  // one per parameter dtype
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace mixtrain::dist
