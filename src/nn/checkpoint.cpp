// Activation checkpointing (nn/checkpoint.h): a segment's forward without a graph, recomputed with
// one during backward.
#include "mixtrain/nn/checkpoint.h"

#include <array>
#include <cmath>
#include <unordered_set>
#include <vector>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/container.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/nn/gpt.h"
#include "mixtrain/nn/gpt2.h"
#include "mixtrain/nn/normalization.h"

namespace mixtrain::nn {

namespace {

using Modules = std::vector<std::shared_ptr<Module>>;

Tensor run(const Modules& modules, Tensor x) {
  for (const auto& m : modules) x = (*m)(x);
  return x;
}

// The parameters of the modules that require grad, each once, in module order.
std::vector<Tensor> trainable_parameters(const Modules& modules) {
  std::vector<Tensor> params;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& m : modules)
    for (const Tensor& p : m->parameters())
      if (p.requires_grad() && seen.insert(&p.impl()).second) params.push_back(p);
  return params;
}

// The generators whose draws the recompute must repeat: every Dropout's, each once. Refuses a
// module whose recompute would change state (a BatchNorm2d in training mode).
std::vector<Generator*> replayed_generators(const Modules& modules) {
  std::vector<Generator*> gens;
  for (const auto& m : modules) {
    for (const auto& [path, sub] : m->named_modules()) {
      MT_CHECK(!(dynamic_cast<BatchNorm2d*>(sub) != nullptr && sub->is_training()),
               "checkpoint: module ", path.empty() ? m->type_name() : path,
               " is a BatchNorm2d in training mode; recomputing it during backward would update its running "
               "statistics twice. Leave it out of the checkpointed segments");
      if (auto* d = dynamic_cast<Dropout*>(sub)) {
        bool known = false;
        for (Generator* g : gens) known = known || g == &d->generator();
        if (!known) gens.push_back(&d->generator());
      }
    }
  }
  return gens;
}

}  // namespace

Tensor checkpoint(std::span<const std::shared_ptr<Module>> span, const Tensor& x) {
  Modules modules(span.begin(), span.end());
  const std::vector<Tensor> params = trainable_parameters(modules);
  autograd::TensorList inputs{x};
  inputs.insert(inputs.end(), params.begin(), params.end());
  if (!autograd::needs_grad(inputs)) return run(modules, x);
  // The recomputation would quantise with scales that moved on since the forward (delayed scaling
  // updates them at every quantisation), so its gradients would not be the forward's.
  MT_CHECK(!amp::is_fp8_enabled(), "activation checkpointing does not support FP8 regions (amp::Fp8Autocast): the ",
           "recomputed forward would quantise with different scales; checkpoint outside the region or train without FP8");

  const std::vector<Generator*> gens = replayed_generators(modules);
  std::vector<std::array<uint64_t, 2>> at_forward;
  for (Generator* g : gens) at_forward.push_back(g->state());
  const amp::AutocastSnapshot autocast;

  Tensor y;
  {
    NoGradGuard no_grad;
    y = run(modules, x);
  }
  y = y.detach();  // a handle of its own: the segment may return x itself or a view of it

  const bool x_requires_grad = x.requires_grad();
  autograd::SavedTensor saved_x(x);
  autograd::record(
      "checkpoint", inputs, y,
      [modules, params, gens, at_forward, autocast, saved_x, x_requires_grad](const autograd::TensorList& grads) {
        autograd::TensorList result(1 + params.size());
        if (!grads[0].defined()) return result;
        Tensor input = saved_x.unpack("checkpoint").detach();
        if (x_requires_grad) input.requires_grad_(true);
        std::vector<std::array<uint64_t, 2>> after_forward;
        for (size_t i = 0; i < gens.size(); ++i) {
          after_forward.push_back(gens[i]->state());
          gens[i]->set_state(at_forward[i]);
        }
        Tensor out;
        {
          autograd::ForwardInBackwardScope forward;
          amp::RestoredAutocast same_autocast(autocast);
          out = run(modules, input);
        }
        for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(after_forward[i]);
        autograd::TensorList wrt;
        if (x_requires_grad) wrt.push_back(input);
        wrt.insert(wrt.end(), params.begin(), params.end());
        autograd::TensorList g = autograd::grad({out}, wrt, {grads[0]});
        size_t k = 0;
        if (x_requires_grad) result[0] = g[k++];
        for (size_t i = 0; i < params.size(); ++i) result[1 + i] = g[k++];
        return result;
      });
  return y;
}

void set_activation_checkpointing(Module& model, bool enabled) {
  if (auto* gpt = dynamic_cast<GPT*>(&model)) {
    gpt->set_checkpoint_activations(enabled);
    return;
  }
  if (auto* gpt2 = dynamic_cast<GPT2*>(&model)) {
    gpt2->set_checkpoint_activations(enabled);
    return;
  }
  if (auto* seq = dynamic_cast<Sequential*>(&model)) {
    const auto n = static_cast<double>(seq->size());
    seq->set_checkpoint_segments(enabled ? static_cast<int64_t>(std::ceil(std::sqrt(n))) : 0);
    return;
  }
  MT_CHECK(!enabled, "set_activation_checkpointing: a ", model.type_name(),
           " has no segments to checkpoint (a GPT, a GPT2 or a Sequential has)");
}

}  // namespace mixtrain::nn
