// CPU batch normalisation kernels: statistics, normalisation, backward, running-stat update.
//
// Accumulation: fp32 for float32/float16/bfloat16 inputs, fp64 for float64 (opmath_t). Sums over
// (N, S) are taken per row of S elements and then across rows, which keeps the fp32 error near
// sqrt(S) + sqrt(N) ulps rather than sqrt(N*S). 16-bit values are loaded to fp32 and the output is
// rounded once on store. Reductions are split across threads by channel and the elementwise parts
// by row, so results do not depend on the thread count.
#include "kernels/nn_batch_norm.h"
#include "backends/cpu/kernels/host_ptr.h"
#include "backends/cpu/kernels/register.h"

#include <cmath>

#include "backends/cpu/kernels/loops.h"

namespace mixtrain::kernels {


namespace {

struct Layout {
  int64_t N, C, S;
  explicit Layout(const Tensor& x) : N(x.size(0)), C(x.size(1)), S(x.numel() / std::max<int64_t>(1, N * x.size(1))) {}
  // Channels per thread chunk so that each chunk touches at least kGrainSize elements.
  int64_t channel_grain() const { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, N * S)); }
  int64_t row_grain() const { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, S)); }
};

template <typename A>
A param_or(const Tensor& t, int64_t c, A fallback) {
  return t.defined() ? host_ptr<A>(t)[c] : fallback;
}

template <typename T>
struct StatsKernel {
  static void run(const Tensor& x, const Tensor& mean, const Tensor& var) {
    using A = opmath_t<T>;
    const Layout L(x);
    const T* px = host_ptr<T>(x);
    A* pm = host_ptr<A>(mean);
    A* pv = host_ptr<A>(var);
    const A inv_count = A(1) / static_cast<A>(L.N * L.S);
    parallel_for(L.C, L.channel_grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        A sum = 0;
        for (int64_t n = 0; n < L.N; ++n) {
          const T* row = px + (n * L.C + c) * L.S;
          A r = 0;
          for (int64_t s = 0; s < L.S; ++s) r += load(row[s]);
          sum += r;
        }
        const A m = sum * inv_count;
        A sq = 0;
        for (int64_t n = 0; n < L.N; ++n) {
          const T* row = px + (n * L.C + c) * L.S;
          A r = 0;
          for (int64_t s = 0; s < L.S; ++s) {
            A d = load(row[s]) - m;
            r += d * d;
          }
          sq += r;
        }
        pm[c] = m;
        pv[c] = sq * inv_count;
      }
    });
  }
};

template <typename T>
struct ForwardKernel {
  static void run(const Tensor& x, const Tensor& mean, const Tensor& var, double eps, const Tensor& weight,
                  const Tensor& bias, const Tensor& out) {
    using A = opmath_t<T>;
    const Layout L(x);
    const T* px = host_ptr<T>(x);
    T* po = host_ptr<T>(out);
    const A* pm = host_ptr<A>(mean);
    const A* pv = host_ptr<A>(var);
    parallel_for(L.N * L.C, L.row_grain(), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t c = r % L.C;
        // y = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale.
        const A invstd = A(1) / std::sqrt(pv[c] + static_cast<A>(eps));
        const A scale = param_or<A>(weight, c, A(1)) * invstd;
        const A shift = param_or<A>(bias, c, A(0)) - pm[c] * scale;
        const T* xr = px + r * L.S;
        T* orow = po + r * L.S;
        for (int64_t s = 0; s < L.S; ++s) orow[s] = store<T>(load(xr[s]) * scale + shift);
      }
    });
  }
};

template <typename T>
struct BackwardKernel {
  static void run(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& var, double eps,
                  const Tensor& weight, bool batch_stats, const Tensor& grad_x, const Tensor& grad_weight,
                  const Tensor& grad_bias) {
    using A = opmath_t<T>;
    const Layout L(x);
    const T* px = host_ptr<T>(x);
    const T* pg = host_ptr<T>(grad_out);
    const A* pm = host_ptr<A>(mean);
    const A* pv = host_ptr<A>(var);
    A* pgw = host_ptr<A>(grad_weight);
    A* pgb = host_ptr<A>(grad_bias);
    // Pass 1, per channel: sum_dy = sum(dy), sum_dy_xmu = sum(dy * (x - mean)).
    parallel_for(L.C, L.channel_grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        A sum_dy = 0, sum_dy_xmu = 0;
        for (int64_t n = 0; n < L.N; ++n) {
          const int64_t off = (n * L.C + c) * L.S;
          A r_dy = 0, r_dy_xmu = 0;
          for (int64_t s = 0; s < L.S; ++s) {
            A dy = load(pg[off + s]);
            r_dy += dy;
            r_dy_xmu += dy * (load(px[off + s]) - pm[c]);
          }
          sum_dy += r_dy;
          sum_dy_xmu += r_dy_xmu;
        }
        const A invstd = A(1) / std::sqrt(pv[c] + static_cast<A>(eps));
        pgb[c] = sum_dy;
        pgw[c] = sum_dy_xmu * invstd;  // sum(dy * x_hat)
      }
    });
    if (!grad_x.defined()) return;
    // Pass 2: dx = a dy + k x + d per channel.
    //   eval:     dx = w invstd dy                                    (mean/var are constants)
    //   training: dx = w invstd (dy - sum_dy / M - x_hat sum(dy x_hat) / M)
    //               = a dy - k (x - mean) - a sum_dy / M   with a = w invstd, k = a invstd^2 sum_dy_xmu / M.
    T* pdx = host_ptr<T>(grad_x);
    const A inv_count = A(1) / static_cast<A>(L.N * L.S);
    parallel_for(L.N * L.C, L.row_grain(), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t c = r % L.C;
        const A invstd = A(1) / std::sqrt(pv[c] + static_cast<A>(eps));
        const A a = param_or<A>(weight, c, A(1)) * invstd;
        A k = 0, d = 0;
        if (batch_stats) {
          k = -a * invstd * pgw[c] * inv_count;  // pgw = sum_dy_xmu * invstd
          d = -k * pm[c] - a * pgb[c] * inv_count;
        }
        const T* xr = px + r * L.S;
        const T* gr = pg + r * L.S;
        T* dr = pdx + r * L.S;
        for (int64_t s = 0; s < L.S; ++s) dr[s] = store<T>(a * load(gr[s]) + k * load(xr[s]) + d);
      }
    });
  }
};

template <typename R>
struct UpdateStatsKernel {
  static void run(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean, const Tensor& var,
                  double momentum, int64_t count) {
    const int64_t C = running_mean.numel();
    R* rm = static_cast<R*>(host_data(running_mean));
    R* rv = static_cast<R*>(host_data(running_var));
    const int64_t sm = running_mean.stride(0), sv = running_var.stride(0);
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    auto update = [&]<typename A>() {
      const A* pm = host_ptr<A>(mean);
      const A* pv = host_ptr<A>(var);
      for (int64_t c = 0; c < C; ++c) {
        // In double: the update is tiny next to the value and must not be rounded twice.
        double m = convert<double>(rm[c * sm]), v = convert<double>(rv[c * sv]);
        rm[c * sm] = convert<R>((1.0 - momentum) * m + momentum * static_cast<double>(pm[c]));
        rv[c * sv] = convert<R>((1.0 - momentum) * v + momentum * static_cast<double>(pv[c]) * unbias);
      }
    };
    if (mean.dtype() == kFloat64)
      update.template operator()<double>();
    else
      update.template operator()<float>();
  }
};

}  // namespace

void register_cpu_batch_norm(const Registry& r) {
  r.floating<StatsKernel>(batch_norm_stats);
  r.floating<ForwardKernel>(batch_norm_forward);
  r.floating<BackwardKernel>(batch_norm_backward);
  r.floating<UpdateStatsKernel>(batch_norm_update_stats);
}

}  // namespace mixtrain::kernels
