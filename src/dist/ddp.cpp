// DistributedDataParallel (mixtrain/dist/ddp.h): buckets filled by post-accumulate-grad hooks,
// all-reduced in index order while backward runs, averaged into .grad when the last gradient
// arrives. The buckets go through the process group (host memory, host-staged for a device model)
// or through the device's collectives (core/device_collectives.h), bootstrapped over the group
// (dist/device_bootstrap.h, shared with ZeRO-1).
#include "mixtrain/dist/ddp.h"

#include <algorithm>
#include <optional>

#include "core/device_collectives.h"
#include "dist/device_bootstrap.h"
#include "dist/parameter_signature.h"
#include "mixtrain/autograd.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/elementwise.h"

namespace mixtrain::dist {

struct DistributedDataParallel::Bucket {
  Tensor flat;               // fp32, the bucket's gradients back to back, on the parameters' device
  Tensor host;               // a cpu mirror of flat, reduced in its place when flat is not on the cpu
                             // and no device collectives reduce it (host-staged)
  int64_t params = 0;        // how many parameters it holds
  int64_t pending = 0;       // of those, not yet ready this backward
  std::shared_ptr<Work> work;  // the all-reduce in flight, until waited for
};

namespace {

// The process group reads host memory: a tensor on another device goes through a host copy.
void broadcast_staged(ProcessGroup& group, const Tensor& t) {
  if (t.device().is_cpu()) return group.broadcast(t, 0);
  Tensor host = t.to(kCPU);
  group.broadcast(host, 0);
  NoGradGuard no_grad;
  Tensor(t).copy_(host);
}

constexpr detail::PathUser kDdp{"DistributedDataParallel", "reduction", "reduces"};

}  // namespace

std::string_view to_string(ReductionPath path) {
  switch (path) {
    case ReductionPath::kAuto: return "auto";
    case ReductionPath::kProcessGroup: return "process group";
    case ReductionPath::kDeviceCollectives: return "device collectives";
  }
  return "?";
}

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options)
    : module_(&module), group_(&group), options_(options) {
  MT_CHECK(options.bucket_cap_mb > 0 && options.bucket_cap_mb <= 1 << 20,
           "DistributedDataParallel: bucket_cap_mb must be in (0, 2^20], got ", options.bucket_cap_mb);
  std::optional<Device> device;
  for (const auto& [name, p] : module.named_parameters()) {
    if (!p.requires_grad()) continue;
    if (!device) device = p.device();
    MT_CHECK(p.device() == *device, "DistributedDataParallel: parameter ", name, " is on ", p.device(),
             " but ", names_.front(), " is on ", *device, ": a module is reduced from one device");
    MT_CHECK(p.is_contiguous(), "DistributedDataParallel: parameter ", name, " is not contiguous");
    params_.push_back(p);
    names_.push_back(name);
  }
  MT_CHECK(!params_.empty(),
           "DistributedDataParallel: the module has no parameter that requires a gradient; nothing to reduce");

  // Every rank must wrap the same model: the same parameters, names, shapes and dtypes.
  const std::vector<int64_t> counts = group.all_gather(static_cast<int64_t>(params_.size()));
  for (int r = 0; r < group.size(); ++r)
    MT_CHECK(counts[r] == counts[0], "DistributedDataParallel: rank ", r, " has ", counts[r],
             " parameters that require grad, rank 0 has ", counts[0], "; every rank must wrap the same model");
  detail::check_same_parameters("DistributedDataParallel", names_, params_, group);

  // The path, the same on every rank (checked there).
  path_ = detail::agree_on_path(kDdp, options.reduction, *device, group);
  if (path_ == ReductionPath::kDeviceCollectives) {
    comm_ = detail::connect_device_communicator(kDdp, group, *device);
    reduction_backend_ = require_device_collectives(device->type).name();
  } else {
    reduction_backend_ = group.backend_name();
  }

  // Rank 0's values everywhere (the parameters only ever change through equal averaged gradients
  // afterwards, so they stay equal). A buffer on another device than the parameters (rare) goes
  // through the process group.
  auto broadcast = [&](const Tensor& t) {
    if (comm_ && t.device() == comm_->device()) comm_->broadcast(t, 0);
    else broadcast_staged(group, t);
  };
  for (const Tensor& p : params_) broadcast(p);
  if (options.broadcast_buffers)
    for (const auto& [name, b] : module.named_buffers()) {
      MT_CHECK(b.is_contiguous(), "DistributedDataParallel: buffer ", name, " must be contiguous");
      broadcast(b);
    }

  // Buckets in reverse parameter order, cut at bucket_cap_mb of fp32 (a larger tensor alone).
  const auto cap = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  bucket_of_.assign(params_.size(), -1);
  offset_of_.assign(params_.size(), 0);
  std::vector<int64_t> current;
  int64_t bytes = 0;
  auto close = [&] {
    if (current.empty()) return;
    bucket_params_.push_back(current);
    current.clear();
    bytes = 0;
  };
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const int64_t b = params_[i].numel() * 4;
    if (!current.empty() && bytes + b > cap) close();
    current.push_back(i);
    bytes += b;
  }
  close();
  for (size_t k = 0; k < bucket_params_.size(); ++k) {
    auto bucket = std::make_unique<Bucket>();
    int64_t n = 0;
    for (int64_t i : bucket_params_[k]) {
      bucket_of_[i] = static_cast<int64_t>(k);
      offset_of_[i] = n;
      n += params_[i].numel();
    }
    bucket->flat = zeros({n}, {.dtype = kFloat32, .device = *device});
    if (!device->is_cpu() && !comm_) bucket->host = zeros({n}, {.dtype = kFloat32, .device = kCPU});
    bucket->params = static_cast<int64_t>(bucket_params_[k].size());
    buckets_.push_back(std::move(bucket));
  }
  ready_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](const Tensor&) { on_grad_ready(static_cast<int64_t>(i)); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_post_accumulate_grad_hook(hook_ids_[i]);
  // Reductions in flight write into the buckets: let them land before the memory goes.
  for (auto& b : buckets_)
    if (b->work) {
      try {
        b->work->wait();
      } catch (...) {  // a destructor does not throw; the job is failing anyway
      }
    }
}

void DistributedDataParallel::start_iteration() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (auto& b : buckets_) b->pending = b->params;
  pending_ = static_cast<int64_t>(params_.size());
  next_launch_ = 0;
  in_iteration_ = true;
}

void DistributedDataParallel::on_grad_ready(int64_t i) {
  if (!sync_) return;  // no_sync: the gradient accumulates locally
  if (!in_iteration_) start_iteration();
  MT_CHECK(!ready_[i], "DistributedDataParallel: parameter ", names_[i],
           " received its gradient twice before the reduction finished (a second backward without no_sync, or "
           "without finish_gradient_sync after one that left parameters without gradient)");
  ready_[i] = 1;
  Bucket& b = *buckets_[bucket_of_[i]];
  const Tensor& p = params_[i];
  b.flat.narrow(0, offset_of_[i], p.numel()).copy_(p.grad().reshape({-1}));  // exact widening to fp32
  --b.pending;
  if (b.pending == 0 && options_.overlap) launch_ready_buckets();
  if (--pending_ == 0) finish_gradient_sync();
}

void DistributedDataParallel::launch_ready_buckets() {
  // In index order only: every rank issues the same collectives in the same order.
  while (next_launch_ < static_cast<int64_t>(buckets_.size()) && buckets_[next_launch_]->pending == 0)
    launch(*buckets_[next_launch_++]);
}

void DistributedDataParallel::launch(Bucket& b) {
  if (comm_) {
    // In device memory, queued after the copies that filled the bucket and before the division that
    // reads it: nothing to wait for on the host.
    comm_->all_reduce(b.flat, DeviceReduceOp::kSum);
  } else {
    if (b.host.defined()) b.host.copy_(b.flat);  // host-staged: the group reduces the mirror
    b.work = group_->all_reduce_async(b.host.defined() ? b.host : b.flat, ReduceOp::kSum);
  }
  ++stats_.buckets_reduced;
  stats_.bytes_reduced += b.flat.numel() * 4;
}

void DistributedDataParallel::finish_gradient_sync() {
  if (!in_iteration_) return;
  in_iteration_ = false;
  std::vector<int64_t> missing;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) missing.push_back(static_cast<int64_t>(i));
  auto wait_all = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& b : buckets_)
      if (b->work) {
        std::shared_ptr<Work> w = std::move(b->work);
        w->wait();
        if (b->host.defined()) b->flat.copy_(b->host);  // the sum back on the device
      }
    stats_.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!missing.empty() && !options_.find_unused_parameters) {
    wait_all();  // the buckets already issued complete on every rank; none is left half-issued
    std::string list;
    for (size_t k = 0; k < missing.size() && k < 8; ++k) list += (k ? ", " : "") + names_[missing[k]];
    if (missing.size() > 8) list += ", ... (" + std::to_string(missing.size()) + " in all)";
    MT_FAIL("DistributedDataParallel: parameters received no gradient in this backward on rank ", group_->rank(), ": ",
            list, ". Every parameter must contribute to the loss, or construct with find_unused_parameters = true");
  }
  // Parameters without a gradient here count as zero; which ones no rank used is agreed first.
  Tensor used;
  if (options_.find_unused_parameters) {
    for (int64_t i : missing) {
      Bucket& b = *buckets_[bucket_of_[i]];
      b.flat.narrow(0, offset_of_[i], params_[i].numel()).fill_(0.0);
      --b.pending;
    }
    std::vector<int64_t> flags(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) flags[i] = ready_[i] ? 1 : 0;
    used = from_vector(flags, {static_cast<int64_t>(flags.size())});
  }
  // The buckets not yet issued (all of them without overlap), in index order; then the used map.
  while (next_launch_ < static_cast<int64_t>(buckets_.size())) launch(*buckets_[next_launch_++]);
  if (used.defined()) group_->all_reduce(used, ReduceOp::kSum);
  wait_all();
  const std::vector<int64_t> used_by = used.defined() ? used.to_vector<int64_t>() : std::vector<int64_t>{};
  const double inv_world = 1.0 / static_cast<double>(group_->size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!used_by.empty() && used_by[i] == 0) continue;  // no rank used it: .grad untouched
    Tensor& p = params_[i];
    const Tensor avg = mul(buckets_[bucket_of_[i]]->flat.narrow(0, offset_of_[i], p.numel()), inv_world).reshape(p.shape());
    Tensor g = p.grad();
    if (g.defined()) g.copy_(avg);  // rounded once into the gradient's dtype
    else p.set_grad(avg.to(p.dtype()));
  }
  ++stats_.reductions;
}

}  // namespace mixtrain::dist
