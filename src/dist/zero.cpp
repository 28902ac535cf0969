// ZeroRedundancyOptimizer (mixtrain/dist/zero.h): each rank's optimizer over views of the flat
// element range it owns, the parameters all-gathered after each update, through the process group
// (host memory) or the device's collectives (dist/device_bootstrap.h, as DDP's buckets).
#include "mixtrain/dist/zero.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <sstream>

#include "core/device_collectives.h"
#include "dist/device_bootstrap.h"
#include "dist/parameter_signature.h"
#include "mixtrain/autograd.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"

namespace mixtrain::dist {
namespace {

// The state keys a state dict may hold, in ParamState::named_tensors() order ("master_low" never).
constexpr std::array<const char*, 6> kStateKeys = {"master", "momentum_buffer", "exp_avg", "exp_avg_sq",
                                                    "max_exp_avg_sq", "kahan_comp"};

constexpr detail::PathUser kZero{"ZeroRedundancyOptimizer", "gather", "gathers"};

// At most this many bytes per rank per all_gather call (the process group takes up to 2 GiB).
constexpr int64_t kGatherPieceBytes = int64_t{1} << 30;

// output[q * n + i] = rank q's input[i], for n = input.numel(), in pieces of at most
// kGatherPieceBytes per rank. CPU tensors.
void all_gather_in_pieces(ProcessGroup& group, const Tensor& input, const Tensor& output) {
  const int64_t n = input.numel();
  const int64_t elem = static_cast<int64_t>(element_size(input.dtype()));
  if (n * elem <= kGatherPieceBytes) return group.all_gather(input, output);
  const int64_t piece = kGatherPieceBytes / elem;
  const int size = group.size();
  Tensor staging = empty({piece * size}, {.dtype = input.dtype(), .device = Device{}});
  for (int64_t start = 0; start < n; start += piece) {
    const int64_t len = std::min(piece, n - start);
    Tensor out = staging.narrow(0, 0, len * size);
    group.all_gather(input.narrow(0, start, len), out);
    for (int q = 0; q < size; ++q) output.narrow(0, q * n + start, len).copy_(out.narrow(0, q * len, len));
  }
}

std::string slice_name(const std::string& name, int64_t begin, int64_t end, int64_t numel) {
  if (begin == 0 && end == numel) return name;
  return mixtrain::detail::concat(name, "[", begin, ":", end, "]");
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::NamedParameter> params, ProcessGroup& group,
                                                 const LocalFactory& make_local, ZeroOptions options)
    : group_(&group), options_(options) {
  MT_CHECK(make_local != nullptr, "ZeroRedundancyOptimizer: the local optimizer factory is empty");
  std::vector<Tensor> tensors;
  std::vector<std::string> names;
  for (auto& p : params) {
    tensors.push_back(p.param);
    names.push_back(p.name);
  }
  add_param_group(tensors, names, /*master_weights=*/false);  // validates; the state lives in local_
  params_ = tensors;
  std::vector<std::string> full_names;
  for (size_t i = 0; i < params_.size(); ++i) {
    offsets_.push_back(total_);
    total_ += params_[i].numel();
    full_names.push_back(param_name(i));
  }
  const int size = group.size();
  // Every rank must shard the same list, or the ranges would not meet.
  detail::check_same_parameters("ZeroRedundancyOptimizer", full_names, params_, group);
  MT_CHECK(total_ >= size, "ZeroRedundancyOptimizer: ", total_, " parameter elements cannot be shared by ", size,
           " ranks (each rank must own at least one)");

  local_slices_ = slices_of(group.rank());
  plan_gathers();
  std::vector<optim::NamedParameter> shard;
  {
    NoGradGuard no_grad;
    for (Slice& s : local_slices_) {
      // A leaf that aliases the owned elements: the local optimizer writes them in place.
      s.view = params_[s.param].detach().view({-1}).narrow(0, s.begin, s.end - s.begin);
      shard.push_back({slice_name(param_name(s.param), s.begin, s.end, params_[s.param].numel()), s.view});
    }
  }
  local_ = make_local(std::move(shard));
  MT_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: the local optimizer factory returned null");
  MT_CHECK(local_->num_parameters() == local_slices_.size(), "ZeroRedundancyOptimizer: the local optimizer holds ",
           local_->num_parameters(), " parameters, not the ", local_slices_.size(), " views it was given");
  // Stochastic rounding draws by (parameter, element): the whole parameter's, as without shards.
  for (size_t j = 0; j < local_slices_.size(); ++j)
    local_->set_rounding_stream(j, static_cast<uint32_t>(local_slices_[j].param), local_slices_[j].begin);
  const std::vector<int64_t> groups = group.all_gather(static_cast<int64_t>(local_->num_param_groups()));
  for (int r = 0; r < size; ++r)
    MT_CHECK(groups[r] == 1, "ZeroRedundancyOptimizer: the factory built ", groups[r], " parameter groups on rank ", r,
             "; ZeRO-1 needs one group (every rank must have the same groups whatever parameters it owns)");

  // The all-gather's path, the same on every rank (checked there). The parameter list is the same on
  // every rank (checked above, devices included), so every rank refuses several devices alike.
  const Device device = params_.front().device();
  const bool one_device =
      std::all_of(params_.begin(), params_.end(), [&](const Tensor& p) { return p.device() == device; });
  MT_CHECK(one_device || options.gather != ReductionPath::kDeviceCollectives,
           "ZeroRedundancyOptimizer: gather = ", to_string(options.gather),
           ", but the parameters are on several devices (", describe(params_.front()),
           " and others); device collectives gather on one device");
  path_ = detail::agree_on_path(kZero, options.gather, one_device ? device : Device(kCPU), group);
  if (path_ == ReductionPath::kDeviceCollectives) {
    comm_ = detail::connect_device_communicator(kZero, group, device);
    gather_backend_ = require_device_collectives(device.type).name();
  } else {
    gather_backend_ = group.backend_name();
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

std::pair<int64_t, int64_t> ZeroRedundancyOptimizer::range_of(int64_t total, int64_t rank, int64_t world) {
  MT_CHECK(world >= 1 && rank >= 0 && rank < world, "ZeroRedundancyOptimizer: rank ", rank,
           " is not in a group of ", world);
  // total * r / world, without the overflow of the product.
  const auto bound = [&](int64_t r) { return total / world * r + total % world * r / world; };
  return {bound(rank), bound(rank + 1)};
}

std::pair<int64_t, int64_t> ZeroRedundancyOptimizer::owned_range(int rank) const {
  return range_of(total_, rank, group_->size());
}

std::vector<ZeroRedundancyOptimizer::Slice> ZeroRedundancyOptimizer::slices_of(int rank) const {
  const auto [lo, hi] = owned_range(rank);
  std::vector<Slice> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t b = std::max(lo, offsets_[i]), e = std::min(hi, offsets_[i] + params_[i].numel());
    if (b < e) out.push_back({static_cast<int64_t>(i), b - offsets_[i], e - offsets_[i], Tensor()});
  }
  return out;
}

void ZeroRedundancyOptimizer::step_group(size_t, float) {
  MT_INTERNAL_ASSERT(false, "ZeroRedundancyOptimizer updates through update()");
}

void ZeroRedundancyOptimizer::update(float inv_scale) {
  // The views' gradients: the owned elements of the (averaged) full gradients.
  for (Slice& s : local_slices_) {
    const Tensor grad = grad_for_step(static_cast<size_t>(s.param));
    s.view.set_grad(grad.defined() ? grad.view({-1}).narrow(0, s.begin, s.end - s.begin) : Tensor());
  }
  local_->step_scaled(inv_scale, /*found_inf=*/false);
  for (Slice& s : local_slices_) s.view.set_grad(Tensor());  // hold no reference to the gradients
  all_gather_parameters();
}

void ZeroRedundancyOptimizer::plan_gathers() {
  std::set<DType> dtypes;
  for (const Tensor& p : params_) dtypes.insert(p.dtype());
  for (const DType dtype : dtypes) {
    GatherPlan plan{dtype, 0, {}};
    for (int q = 0; q < group_->size(); ++q) {
      std::vector<Slice> mine;
      int64_t n = 0;
      for (const Slice& s : slices_of(q))
        if (params_[s.param].dtype() == dtype) {
          mine.push_back(s);
          n += s.end - s.begin;
        }
      plan.chunk = std::max(plan.chunk, n);
      plan.by_rank.push_back(std::move(mine));
    }
    if (plan.chunk > 0) gather_plans_.push_back(std::move(plan));
  }
}

// Per dtype: every rank's owned elements back to back (padded to the longest rank's count), gathered
// in device memory by the device collectives or through host memory by the process group, and each
// other rank's elements copied into the parameters. Bytes only: nothing is computed.
void ZeroRedundancyOptimizer::all_gather_parameters() {
  const int size = group_->size();
  if (size == 1 && !comm_) return;  // a forced communicator of one rank still runs (the NCCL smoke test)
  const int rank = group_->rank();
  for (const GatherPlan& plan : gather_plans_) {
    const int64_t chunk = plan.chunk;
    // On the device path the buffer lives there and this rank's block is the input (in place, as
    // NCCL allows); on the host path the input is a host chunk of its own.
    Tensor gathered = empty({chunk * size}, {.dtype = plan.dtype, .device = comm_ ? comm_->device() : Device{}});
    Tensor mine =
        comm_ ? gathered.narrow(0, rank * chunk, chunk) : empty({chunk}, {.dtype = plan.dtype, .device = Device{}});
    int64_t at = 0;
    for (const Slice& s : local_slices_) {
      if (params_[s.param].dtype() != plan.dtype) continue;
      mine.narrow(0, at, s.end - s.begin).copy_(s.view);
      at += s.end - s.begin;
    }
    if (at < chunk) mine.narrow(0, at, chunk - at).fill_(0.0);  // the padding: defined bytes on the wire
    if (comm_)
      comm_->all_gather(mine, gathered);
    else
      all_gather_in_pieces(*group_, mine, gathered);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      at = 0;
      for (const Slice& s : plan.by_rank[static_cast<size_t>(q)]) {
        params_[s.param].detach().view({-1}).narrow(0, s.begin, s.end - s.begin).copy_(
            gathered.narrow(0, q * chunk + at, s.end - s.begin));
        at += s.end - s.begin;
      }
    }
  }
  for (const Tensor& p : params_) p.bump_version();
}

std::vector<ZeroStatePiece> ZeroRedundancyOptimizer::local_state_pieces() const {
  const optim::OptimizerStateDict sd = local_->state_dict();
  std::vector<ZeroStatePiece> out;
  for (size_t j = 0; j < local_slices_.size(); ++j) {
    const Slice& s = local_slices_[j];
    out.push_back({s.param, s.begin, s.end, sd.state[j].step, sd.state[j].named_tensors()});
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_pieces(const std::vector<ZeroStatePiece>& pieces) {
  const std::string who = "ZeroRedundancyOptimizer.load_state_pieces: ";
  for (const ZeroStatePiece& p : pieces) {
    MT_CHECK(p.param >= 0 && p.param < static_cast<int64_t>(params_.size()), who, "a piece names parameter ", p.param,
             " of ", params_.size());
    const int64_t numel = params_[p.param].numel();
    MT_CHECK(p.begin >= 0 && p.begin < p.end && p.end <= numel, who, "piece [", p.begin, ", ", p.end, ") of ",
             param_name(p.param), " is not a range within its ", numel, " elements");
    for (const auto& [key, t] : p.tensors)
      MT_CHECK(t.defined() && t.dim() == 1 && t.numel() == p.end - p.begin, who, "state '", key, "' of ",
               param_name(p.param), "[", p.begin, ":", p.end, "] is ", t.defined() ? describe(t) : "undefined",
               ", expected ", p.end - p.begin, " elements in one dimension");
  }
  optim::OptimizerStateDict sd;
  for (size_t g = 0; g < local_->num_param_groups(); ++g) {
    std::map<std::string, double> h = local_->hyperparameters(g);
    if (initial_lr(g)) h["initial_lr"] = *initial_lr(g);
    sd.param_groups.push_back(std::move(h));
  }
  NoGradGuard no_grad;
  for (const Slice& s : local_slices_) {
    const std::string where = mixtrain::detail::concat(param_name(s.param), "[", s.begin, ":", s.end, "]");
    std::vector<const ZeroStatePiece*> covering;
    for (const ZeroStatePiece& p : pieces)
      if (p.param == s.param && p.begin < s.end && p.end > s.begin) covering.push_back(&p);
    std::sort(covering.begin(), covering.end(),
              [](const ZeroStatePiece* a, const ZeroStatePiece* b) { return a->begin < b->begin; });
    // The pieces must tile the slice: no gap, no overlap.
    int64_t next = s.begin;
    for (const ZeroStatePiece* p : covering) {
      MT_CHECK(p->begin <= next && p->end > next && (p == covering.front() || p->begin == next), who,
               "the saved state of ", where, " has ", p->begin > next ? "a gap" : "overlapping pieces", " at element ",
               next);
      next = p->end;
    }
    MT_CHECK(!covering.empty() && next >= s.end, who, "the saved state does not cover ", where,
             covering.empty() ? "" : mixtrain::detail::concat(" (it ends at element ", next, ")"));
    optim::ParamState state;
    state.step = covering.front()->step;
    std::map<std::string, DType> keys;
    for (const auto& [key, t] : covering.front()->tensors) keys[key] = t.dtype();
    for (const ZeroStatePiece* p : covering) {
      MT_CHECK(p->step == state.step, who, "the pieces of ", param_name(s.param), " disagree on its update count (",
               p->step, " and ", state.step, ")");
      std::map<std::string, DType> these;
      for (const auto& [key, t] : p->tensors) these[key] = t.dtype();
      MT_CHECK(these == keys, who, "the pieces of ", param_name(s.param), " hold different state tensors or dtypes");
    }
    for (const auto& entry : keys) {
      const std::string& key = entry.first;  // a plain name: clang 14 cannot capture structured bindings
      const DType dtype = entry.second;
      Tensor* field = state.state_dict_entry(key);
      MT_CHECK(field != nullptr, who, "unknown state '", mixtrain::detail::quote_untrusted(key), "' for ", where);
      Tensor whole = empty({s.end - s.begin}, {.dtype = dtype, .device = s.view.device()});
      for (const ZeroStatePiece* p : covering) {
        const int64_t b = std::max(p->begin, s.begin), e = std::min(p->end, s.end);
        const Tensor& src = std::find_if(p->tensors.begin(), p->tensors.end(), [&](const auto& kv) {
                              return kv.first == key;
                            })->second;
        whole.narrow(0, b - s.begin, e - b).copy_(src.narrow(0, b - p->begin, e - b));
      }
      *field = whole;
    }
    sd.state.push_back(std::move(state));
  }
  local_->load_state_dict(sd);
}

optim::OptimizerStateDict ZeroRedundancyOptimizer::state_dict() const {
  const int size = group_->size();
  const std::vector<ZeroStatePiece> mine = local_state_pieces();
  // Which keys (and dtypes) each piece holds, and its update count: one line per piece.
  std::ostringstream layout;
  for (const ZeroStatePiece& p : mine) {
    layout << p.param << ' ' << p.begin << ' ' << p.end << ' ' << p.step;
    for (const auto& [key, t] : p.tensors) layout << ' ' << key << ' ' << static_cast<int>(t.dtype());
    layout << '\n';
  }
  const std::vector<std::string> layouts = group_->all_gather(layout.str());

  struct Described {
    int rank;
    int64_t param, begin, end, step, at;  // `at`: element offset in that rank's gathered buffer
    std::map<std::string, DType> keys;
  };
  std::vector<Described> described;
  std::set<std::string> keys_anywhere;
  for (int q = 0; q < size; ++q) {
    std::istringstream in(layouts[static_cast<size_t>(q)]);
    std::string line;
    int64_t at = 0;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      Described d{q, 0, 0, 0, 0, at, {}};
      f >> d.param >> d.begin >> d.end >> d.step;
      std::string key;
      int dtype = 0;
      while (f >> key >> dtype) {
        d.keys[key] = static_cast<DType>(dtype);
        keys_anywhere.insert(key);
      }
      at += d.end - d.begin;
      described.push_back(std::move(d));
    }
  }

  optim::OptimizerStateDict out;
  out.state.resize(params_.size());
  for (const Described& d : described) out.state[static_cast<size_t>(d.param)].step = d.step;
  const int64_t chunk = (total_ + size - 1) / size;
  NoGradGuard no_grad;
  for (const char* key : kStateKeys) {
    if (!keys_anywhere.contains(key)) continue;
    // fp32 holds every state dtype exactly (bf16 moments and compensations widen exactly).
    Tensor flat = zeros({chunk}, {.dtype = kFloat32, .device = Device{}});
    int64_t at = 0;
    for (const ZeroStatePiece& p : mine) {
      for (const auto& [k, t] : p.tensors)
        if (k == key) flat.narrow(0, at, p.end - p.begin).copy_(t);
      at += p.end - p.begin;
    }
    Tensor gathered = empty({chunk * size}, {.dtype = kFloat32, .device = Device{}});
    all_gather_in_pieces(*group_, flat, gathered);
    for (const Described& d : described) {
      const auto it = d.keys.find(key);
      if (it == d.keys.end()) continue;
      const Tensor& param = params_[static_cast<size_t>(d.param)];
      Tensor* field = out.state[static_cast<size_t>(d.param)].state_dict_entry(key);
      if (!field->defined()) *field = zeros(param.shape(), {.dtype = it->second, .device = param.device()});
      field->view({-1}).narrow(0, d.begin, d.end - d.begin).copy_(gathered.narrow(0, d.rank * chunk + d.at, d.end - d.begin));
    }
  }
  for (size_t g = 0; g < local_->num_param_groups(); ++g) {
    std::map<std::string, double> h = local_->hyperparameters(g);
    if (initial_lr(g)) h["initial_lr"] = *initial_lr(g);
    out.param_groups.push_back(std::move(h));
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::OptimizerStateDict& sd) {
  MT_CHECK(sd.state.size() == params_.size(), "ZeroRedundancyOptimizer.load_state_dict: the state dict has ",
           sd.state.size(), " parameter states, this optimizer has ", params_.size(), " parameters");
  MT_CHECK(sd.param_groups.size() == 1, "ZeroRedundancyOptimizer.load_state_dict: the state dict has ",
           sd.param_groups.size(), " parameter groups; ZeRO-1 has one");
  std::vector<ZeroStatePiece> pieces;
  for (const Slice& s : local_slices_) {
    const optim::ParamState& full = sd.state[static_cast<size_t>(s.param)];
    ZeroStatePiece p{s.param, s.begin, s.end, full.step, {}};
    for (const auto& [key, t] : full.named_tensors()) {
      MT_CHECK(t.numel() == params_[s.param].numel(), "ZeroRedundancyOptimizer.load_state_dict: state '", key,
               "' of ", param_name(s.param), " is ", describe(t), ", expected the parameter's shape ",
               params_[s.param].shape());
      p.tensors.emplace_back(key, t.contiguous().view({-1}).narrow(0, s.begin, s.end - s.begin));
    }
    pieces.push_back(std::move(p));
  }
  const std::map<std::string, double> old = local_->hyperparameters(0);
  local_->set_hyperparameters(0, sd.param_groups[0]);
  try {
    load_state_pieces(pieces);
  } catch (...) {
    local_->set_hyperparameters(0, old);
    throw;
  }
  const auto it = sd.param_groups[0].find("initial_lr");
  if (it != sd.param_groups[0].end()) set_initial_lr(0, it->second);
  // Each rank set its own elements from their masters; the others' come from them.
  all_gather_parameters();
}

}  // namespace mixtrain::dist
