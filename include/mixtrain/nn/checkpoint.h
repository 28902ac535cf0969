// mixtrain/nn/checkpoint.h: activation checkpointing.
//
// checkpoint(modules, x) runs `modules` one after another on x (as Sequential does) without
// keeping their activations for backward: the forward runs with grad mode off and only x is
// saved. When the gradient of the result arrives, backward runs the same forward again with a
// graph -- under the autocast state of the original forward (amp::AutocastSnapshot) and with
// every Dropout generator of the modules set back to its state at the original forward, so the
// same masks are drawn -- and backpropagates through it. It trades one extra forward of the
// segment for its activations: the memory of a segment's intermediate tensors is held only while
// its own backward runs.
//
// Gradients are bit-identical to the plain run: the recomputed forward performs the same
// operations on the same inputs (CPU kernels never depend on the thread count), and each
// parameter's gradient is computed inside the segment and accumulated into .grad by the outer
// backward as in the plain run. (A parameter used both inside and outside one segment receives
// its contributions in a different order, which can change the last bit of their sum.)
//
// Refused: a BatchNorm2d in training mode among the modules (the recompute would update its
// running statistics a second time). Without grad mode, or when neither x nor a parameter of the
// modules requires grad, the modules simply run.
#pragma once

#include <memory>
#include <span>

#include "mixtrain/nn/module.h"
#include "mixtrain/tensor.h"

namespace mixtrain::nn {

// x: whatever the first module accepts; returns the last module's output (any shape and dtype).
Tensor checkpoint(std::span<const std::shared_ptr<Module>> modules, const Tensor& x);

// Turns activation checkpointing on or off for a model: a GPT checkpoints each transformer block
// (GPT::set_checkpoint_activations), a Sequential splits its children into about sqrt(n) segments
// (Sequential::set_checkpoint_segments); other modules have no segments and are refused.
void set_activation_checkpointing(Module& model, bool enabled);

}  // namespace mixtrain::nn
