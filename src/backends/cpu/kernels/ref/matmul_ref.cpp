// Reference matmul: a triple loop accumulating in fp64 (the test oracle, and the fp64 kernel).
// Operands are widened exactly to contiguous fp64 first, so every input dtype and stride pattern
// goes through the same loop; each output row is computed by one thread, so the result does not
// depend on the thread count.
#include <algorithm>
#include <vector>

#include "kernels/copy.h"
#include "backends/cpu/kernels/loops.h"
#include "backends/cpu/kernels/ref/linalg_ref.h"
#include "backends/cpu/kernels/host_ptr.h"

namespace mixtrain::kernels::ref {

Tensor to_f64_contiguous(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), kFloat64, t.device());
  copy(out, t.detach());
  return out;
}

namespace {

// Element offset of batch index `linear` (over out's batch dims) in an operand whose batch dims
// are out's or 1, with contiguous strides `st`.
int64_t batch_offset(int64_t linear, const Shape& out_shape, const Shape& shape, const Shape& st, int nbatch) {
  int64_t off = 0;
  for (int d = nbatch - 1; d >= 0; --d) {
    const int64_t i = linear % out_shape[d];
    linear /= out_shape[d];
    if (shape[d] != 1) off += i * st[d];
  }
  return off;
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  MT_INTERNAL_ASSERT(a.dim() == out.dim() && b.dim() == out.dim() && out.dim() >= 2 && out.is_contiguous());
  const int r = out.dim(), nbatch = r - 2;
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  Tensor A = to_f64_contiguous(a), B = to_f64_contiguous(b);
  Tensor bias64 = bias.defined() ? to_f64_contiguous(bias) : Tensor();
  Tensor C = Tensor::empty(out.shape(), kFloat64, out.device());
  const double* pa = host_ptr<double>(A);
  const double* pb = host_ptr<double>(B);
  const double* pbias = bias.defined() ? host_ptr<double>(bias64) : nullptr;
  double* pc = host_ptr<double>(C);
  const int64_t batches = out.numel() / std::max<int64_t>(n * m, 1);
  const int64_t rows = batches * n;
  // ~2^16 multiply-adds per thread at least: small products stay on one thread.
  parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(m * k, 1)), [&](int64_t begin, int64_t end) {
    std::vector<double> acc(m);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / n, i = row % n;
      const double* arow = pa + batch_offset(bi, out.shape(), a.shape(), A.strides(), nbatch) + i * k;
      const double* bmat = pb + batch_offset(bi, out.shape(), b.shape(), B.strides(), nbatch);
      for (int64_t j = 0; j < m; ++j) acc[j] = pbias ? pbias[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av = arow[kk];
        const double* brow = bmat + kk * m;
        for (int64_t j = 0; j < m; ++j) acc[j] += av * brow[j];
      }
      double* crow = pc + row * m;
      for (int64_t j = 0; j < m; ++j) crow[j] = acc[j];
    }
  });
  copy(out, C);
}

}  // namespace mixtrain::kernels::ref
