// linear_cross_entropy: a language model's output head and its loss, one block of rows at a time
// (the contract is in mixtrain/nn/functional.h). Device-generic: every step is a kernel table
// (matmul, the cross_entropy kernels, round-through, sum_rows), so each backend runs it as it
// runs the unfused ops.
//
// Why the gradient is made in the forward: a block's logits are the costly part (a [rows, C] x
// [C, V] product); computing the softmax gradient while they are at hand makes each block's
// logits once, as the unfused path does, where recomputing them in backward would add a third of
// the head's products to every step. The loss's own gradient (the loss scale, times 1 for a plain
// backward) is unknown until backward, so the blocks produce the gradients for a gradient of one,
// in fp32, and backward scales them. The 16-bit rounding of dlogits (the operand that the unfused
// path's 16-bit products read) is taken with a power-of-two pre-scale that keeps fp16 in range;
// powers of two change no bf16 or fp32 value.
#include <algorithm>
#include <cmath>

#include "core/views.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/loss.h"
#include "kernels/shape_ops.h"
#include "mixtrain/autograd.h"
#include "mixtrain/factory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/reduce.h"
#include "ops/autocast_hook.h"
#include "ops/loss_reduction.h"

namespace mixtrain::nn::functional {
namespace {

using autograd::TensorList;

constexpr const char* kOp = "linear_cross_entropy";

void check_arguments(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& target,
                     const LinearCrossEntropyOptions& o, bool params_rounded) {
  MT_CHECK(x.defined() && x.is_floating_point() && x.dim() >= 1, kOp,
           ": expected floating-point hidden states [..., C], got ", x.defined() ? describe(x) : "an undefined tensor");
  MT_CHECK(w.defined() && w.is_floating_point() && w.dim() == 2 && w.size(1) == x.size(-1), kOp,
           ": expected a weight [V, ", x.size(-1), "] for the hidden states ", describe(x), ", got ",
           w.defined() ? describe(w) : "an undefined tensor");
  MT_CHECK(w.device() == x.device(), kOp, ": the weight is on ", w.device(), " but the hidden states are on ",
           x.device());
  // Rounded parameters (autocast's fp32 route) are fp32 holding x's 16-bit values; otherwise one dtype.
  MT_CHECK(params_rounded || w.dtype() == x.dtype(), kOp, ": expected the hidden states and the weight to have the ",
           "same dtype, got ", describe(x), " and ", describe(w), " (convert one with .to(dtype), or run under autocast)");
  if (b.defined()) {
    MT_CHECK(b.is_floating_point() && b.dim() == 1 && b.size(0) == w.size(0), kOp, ": expected a bias [", w.size(0),
             "], got ", describe(b));
    MT_CHECK(b.device() == x.device(), kOp, ": the bias is on ", b.device(), " but the hidden states are on ",
             x.device());
    MT_CHECK((params_rounded && b.dtype() == kFloat32) || b.dtype() == x.dtype(), kOp,
             ": expected a bias of the hidden states' dtype, got ", describe(b), " with ", describe(x));
  }
  MT_CHECK(target.defined() && (target.dtype() == kInt64 || target.dtype() == kInt32), kOp,
           ": target must hold int64 or int32 class indices, got ", target.defined() ? describe(target) : "none");
  MT_CHECK(target.device() == x.device(), kOp, ": target is on ", target.device(), " but the hidden states are on ",
           x.device());
  Shape expected = x.shape();
  expected.erase(expected.size() - 1);
  MT_CHECK(target.shape() == expected, kOp, ": target ", describe(target), " does not match the hidden states ",
           describe(x), "; expected a target of shape ", expected, " (one class per row)");
  MT_CHECK(o.reduction != Reduction::kNone, kOp,
           ": reduction none is not supported (per-row losses: cross_entropy(linear(x, weight, bias), target, "
           "Reduction::kNone))");
  MT_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, kOp, ": label_smoothing must be in [0, 1], got ",
           o.label_smoothing);
  MT_CHECK(o.block_rows >= 0, kOp, ": block_rows must be >= 0 (0: the default), got ", o.block_rows);
}

// An exact copy of t in `dtype` (t itself when it has it).
Tensor widened(const Tensor& t, DType dtype) { return !t.defined() || t.dtype() == dtype ? t : t.to(dtype); }

// The power of two that the blocks multiply dlogits by before rounding them through `precision`:
// |dlogits| <= 1 per row, so 2^14 keeps the largest below fp16's maximum (65504) and lifts the small
// probabilities of a large vocabulary above its subnormals. 1 for fp32 and fp64 (no rounding).
double dlogits_prescale(DType precision) { return precision == kFloat16 || precision == kBFloat16 ? 16384.0 : 1.0; }

// t (fp32, contiguous) = t rounded through `precision` in place: the one-pass kernel where the
// device has it, else a 16-bit copy and back.
void round_through_in_place(const Tensor& t, DType precision) {
  if (kernels::round_through_table.has(t.device().type, precision)) {
    kernels::round_through_table(t.device(), precision)(t, t);
  } else {
    Tensor(t).copy_(t.to(precision));
  }
}

// The three products of a block of rows: logits = x W^T + b, dx = dlogits W and dW += dlogits^T x,
// all accumulated in fp32 into fp32 outputs. Where the device's 16-bit products are native
// (uses_fp32_route false and a widening product registered), the operands stay 16-bit and dlogits
// is rounded into a 16-bit copy: no fp32 copy of the [V, C] weight, and the 16-bit kernels' speed
// (the fp32 products cost the fused head 1.8x on a CPU with native bf16). Elsewhere the operands
// are widened once, exactly, and the fp32 products run: the products of 16-bit values accumulated
// in fp32, as the 16-bit kernels compute them. The same numbers either way, up to the order of the
// fp32 sums.
class BlockProducts {
 public:
  // x [N, C], w [V, C], b [V] or undefined, as autocast left them; op_dt: fp32 or fp64.
  BlockProducts(const Tensor& x, const Tensor& w, const Tensor& b, DType op_dt)
      : dt_(x.dtype()), op_dt_(op_dt), device_(x.device()) {
    native_ = (dt_ == kBFloat16 || dt_ == kFloat16) && w.dtype() == dt_ && !kernels::uses_fp32_route(device_, dt_) &&
              kernels::matmul_widening_table.has(device_.type, dt_);
    b_ = b.defined() ? widened(b, op_dt).contiguous() : Tensor();  // [V]: widened once, whatever the path
    if (native_) {
      widening_ = kernels::matmul_widening_table(device_, dt_);
      x_ = x.contiguous();
      w_ = w;
      return;
    }
    x_ = widened(x, op_dt).contiguous();
    w_ = widened(w, op_dt);
    product_ = kernels::matmul_kernel()(device_, op_dt);
    if (kernels::matmul_accumulate_table.has(device_.type, op_dt))
      accumulate_ = kernels::matmul_accumulate_table(device_, op_dt);
  }

  void logits(int64_t r0, int64_t rows, const Tensor& out) const {
    const Tensor xb = x_.narrow(0, r0, rows);
    if (native_) {
      widening_(xb, w_.t(), b_, out, false);
    } else {
      product_(xb, w_.t(), b_, out);
    }
  }

  // dlogits (op_dt) rounded through dt where dt is 16-bit; returns the operand of the gradient
  // products: a 16-bit copy (native), else dlogits itself. keep_rounded: dlogits itself must hold
  // the rounded values afterwards (the bias gradient sums it).
  const Tensor& round_dlogits(const Tensor& dlogits, DType dt, bool keep_rounded) {
    if (dt != kBFloat16 && dt != kFloat16) return dlogits;
    if (!native_ || keep_rounded) round_through_in_place(dlogits, dt);
    if (!native_) return dlogits;
    if (!dlogits16_.defined() || dlogits16_.shape() != dlogits.shape())
      dlogits16_ = empty(dlogits.shape(), {.dtype = dt, .device = device_});
    kernels::copy(dlogits16_, dlogits);  // rounds to nearest even, as round_through
    return dlogits16_;
  }

  void grad_x(const Tensor& dlogits, const Tensor& out) const {
    if (native_) {
      widening_(dlogits, w_, Tensor(), out, false);
    } else {
      product_(dlogits, w_, Tensor(), out);
    }
  }

  // dw (= or +=) dlogits^T x of rows [r0, r0 + rows).
  void grad_w(const Tensor& dlogits, int64_t r0, int64_t rows, const Tensor& dw, bool accumulate) {
    const Tensor xb = x_.narrow(0, r0, rows);
    if (native_) {
      widening_(dlogits.t(), xb, Tensor(), dw, accumulate);
    } else if (!accumulate) {
      product_(dlogits.t(), xb, Tensor(), dw);
    } else if (accumulate_ != nullptr) {
      accumulate_(dlogits.t(), xb, dw);
    } else {  // a backend without the accumulating product: a [V, C] temporary
      if (!dw_block_.defined()) dw_block_ = empty(dw.shape(), {.dtype = op_dt_, .device = device_});
      product_(dlogits.t(), xb, Tensor(), dw_block_);
      Tensor(dw).add_(dw_block_);
    }
  }

 private:
  DType dt_, op_dt_;
  Device device_;
  bool native_ = false;
  Tensor x_, w_, b_;  // x and w: 16-bit (native) or op_dt; b: op_dt
  kernels::MatmulFn* product_ = nullptr;
  kernels::MatmulAccumulateFn* accumulate_ = nullptr;
  kernels::MatmulWideningFn* widening_ = nullptr;
  Tensor dlogits16_, dw_block_;  // reused across blocks
};

}  // namespace

int64_t linear_cross_entropy_block_rows(int64_t vocab_size) {
  MT_CHECK(vocab_size > 0, kOp, ": the vocabulary size must be positive, got ", vocab_size);
  return std::max<int64_t>(64, kLinearCrossEntropyBlockBytes / (vocab_size * int64_t{4}) / 64 * 64);
}

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Tensor& target,
                            const LinearCrossEntropyOptions& options) {
  // The weight and bias as the caller gave them (fp32 parameters under autocast): the gradients go
  // to them directly, rounded here as autocast's casts would round them, so that no cast's backward
  // allocates another [V, C] tensor.
  const Tensor& w_param = w_in;
  const Tensor& b_param = b_in;
  Tensor x = x_in, w = w_in, b = b_in;
  bool params_rounded = false;
  auto region = ops::autocast_linear(OpId::kLinearCrossEntropy, x, w, b, params_rounded);
  check_arguments(x, w, b, target, options, params_rounded);

  const DType dt = x.dtype();
  const DType op_dt = dt == kFloat64 ? kFloat64 : kFloat32;  // logits, softmax, loss and accumulators
  const Device device = x.device();
  const int64_t C = w.size(1), V = w.size(0);
  const int64_t N = target.numel();
  const Tensor t = target.contiguous().reshape({N});
  const kernels::IndexCheck checked = kernels::check_index(t, V, options.ignore_index);
  if (const auto& bad = checked.bad) {
    MT_FAIL(kOp, ": target value ", bad->value, " (at position ", bad->position, " of target ", describe(target),
            ") is out of range for ", V, " classes; valid targets are 0 to ", V - 1, " or ignore_index (",
            options.ignore_index, ")");
  }
  const int64_t valid_rows = N - checked.ignored;

  const bool need_x = x.requires_grad(), need_w = w_param.requires_grad();
  const bool need_b = b_param.defined() && b_param.requires_grad();
  const bool need_grad = autograd::needs_grad({&x, &w_param, &b_param});

  Tensor losses = empty({N}, {.dtype = op_dt, .device = device});  // per row, 0 where ignored
  Tensor dx, dw, db;  // gradients for a loss gradient of `prescale`, summed (not averaged) over rows
  const double prescale = dlogits_prescale(dt);
  {
    NoGradGuard no_grad;
    BlockProducts products(x.detach().reshape({N, C}), w.detach(), b.defined() ? b.detach() : Tensor(), op_dt);
    const kernels::ClassLossParams p{.log_probs = false,
                                     .ignore_index = options.ignore_index,
                                     .label_smoothing = options.label_smoothing,
                                     .reduction = kernels::Reduction::kNone};
    kernels::ClassLossParams grad_p = p;
    grad_p.reduction = kernels::Reduction::kSum;  // dlogits = (softmax - target) * gy, per row
    const Tensor gy = full(Shape{}, prescale, {.dtype = op_dt, .device = device});
    if (need_grad) {
      if (need_x) dx = empty({N, C}, {.dtype = op_dt, .device = device});
      if (need_w) dw = zeros({V, C}, {.dtype = op_dt, .device = device});  // no rows: no gradient
      if (need_b) db = zeros({V}, {.dtype = op_dt, .device = device});
    }
    const int64_t block = options.block_rows > 0 ? options.block_rows : linear_cross_entropy_block_rows(V);
    Tensor logits, dlogits, lse, db_block;  // per-block buffers, reused
    for (int64_t r0 = 0; r0 < N; r0 += block) {
      const int64_t rows = std::min(block, N - r0);
      if (!logits.defined() || logits.size(0) != rows) {
        logits = empty({rows, V}, {.dtype = op_dt, .device = device});
        lse = empty({rows, 2}, {.dtype = op_dt, .device = device});
        if (need_grad) dlogits = empty({rows, V}, {.dtype = op_dt, .device = device});
      }
      const Tensor tb = t.narrow(0, r0, rows);
      products.logits(r0, rows, logits);
      kernels::class_loss_fwd(device, op_dt)(logits, tb, losses.narrow(0, r0, rows), lse, p, valid_rows);
      if (!need_grad) continue;
      kernels::class_loss_bwd(device, op_dt)(logits, tb, lse, gy, dlogits, grad_p, valid_rows);
      // dlogits as the 16-bit products read them: rounded through x's dtype (the bias gradient sums
      // the rounded values, as the unfused path's does).
      const Tensor& dlogits_in = products.round_dlogits(dlogits, dt, need_b);
      if (need_x) products.grad_x(dlogits_in, dx.narrow(0, r0, rows));
      if (need_w) products.grad_w(dlogits_in, r0, rows, dw, /*accumulate=*/r0 > 0);
      if (need_b) {
        if (!db_block.defined()) db_block = empty({V}, {.dtype = op_dt, .device = device});
        kernels::sum_rows(dlogits, db_block);
        db.add_(db_block);
      }
    }
  }
  // The loss: sum of the rows' losses (in op_dt), over the valid rows for the mean (NaN for none).
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = sum(losses);
    if (options.reduction == Reduction::kMean) loss = loss * (1.0 / static_cast<double>(valid_rows));
  }
  if (!need_grad) return loss;

  // dL/d(input) = g * (accumulated gradient) * factor, rounded once into the input's dtype (through
  // the 16-bit dtype for an fp32 parameter of a 16-bit product, as autocast's cast would). A mean over
  // no valid rows has no gradient (the unfused cross_entropy's is zero there too).
  const double factor = valid_rows == 0 ? 0.0
                        : options.reduction == Reduction::kMean
                            ? 1.0 / (prescale * static_cast<double>(valid_rows))
                            : 1.0 / prescale;
  // Backward scales the buffers in place and hands them on: it can run once per forward.
  struct Gradients {
    Tensor dx, dw, db;
    bool consumed = false;
  };
  auto saved = std::make_shared<Gradients>(Gradients{dx, dw, db});
  dx = dw = db = Tensor();
  const Shape x_shape = x.shape();
  const DType w_dt = w_param.dtype(), b_dt = b_param.defined() ? b_param.dtype() : dt;
  autograd::record(
      kOp, {x, w_param, b_param}, loss, [saved, factor, x_shape, dt, op_dt, w_dt, b_dt](const TensorList& grads) {
        MT_CHECK(!saved->consumed, kOp,
                 ": a second backward through one forward; the fused head makes its gradients in the forward and "
                 "the first backward consumes them: run the forward again");
        saved->consumed = true;
        const Tensor s = grads[0].to(op_dt) * factor;  // 0-d
        // In place: t *= s, rounded through the product's 16-bit dtype for an fp32 parameter, then
        // in `to` (t itself where it has that dtype).
        auto finish = [&](Tensor& t, DType to) {
          kernels::binary_kernel(kernels::BinaryOp::kMul)(t.device(), op_dt)(t, t, views::expand(s, t.shape()), {});
          if (to == kFloat32 && (dt == kBFloat16 || dt == kFloat16)) round_through_in_place(t, dt);
          Tensor out = widened(t, to);
          t = Tensor();
          return out;
        };
        TensorList result(3);
        if (saved->dx.defined()) result[0] = finish(saved->dx, dt).reshape(x_shape);
        if (saved->dw.defined()) result[1] = finish(saved->dw, w_dt);
        if (saved->db.defined()) result[2] = finish(saved->db, b_dt);
        return result;
      });
  return loss;
}

}  // namespace mixtrain::nn::functional
