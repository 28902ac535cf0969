// compare_weights A.safetensors B.safetensors TOLERANCE [--whole-model]: the largest relative
// difference ||a - b|| / ||b|| over the tensors the two files share (the same names, shapes and dtypes
// are required) and the whole model's (all tensors as one vector), printed; exit 0 when the largest
// (with --whole-model: the whole model's) is at most TOLERANCE, 1 when above, 2 on unusable input.
// The whole model's is the measure where AdamW has moved some tensors by rounding noise: a
// parameter whose exact gradient is zero or nearly (attention's key bias, softmax being invariant to
// it) is stepped by +-lr in whatever direction the noise points, so two devices' runs differ there by
// the whole update, while the model as a whole agrees to its kernels' rounding.
// The data-parallel acceptance test (tests/dist/ddp_matches_one_process.cmake) runs it on the
// weights of a 2-process run and of one process on the global batch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "mixtrain/io/safetensors.h"
#include "mixtrain/mixtrain.h"

int main(int argc, char** argv) {
  namespace mt = mixtrain;
  const bool whole_model = argc == 5 && std::string(argv[4]) == "--whole-model";
  if (argc != 4 && !whole_model) {
    std::fprintf(stderr, "usage: compare_weights A.safetensors B.safetensors TOLERANCE [--whole-model]\n");
    return 2;
  }
  try {
    const double tol = std::stod(argv[3]);
    const mt::io::SafetensorsFile a = mt::io::load_safetensors(argv[1]), b = mt::io::load_safetensors(argv[2]);
    if (a.tensors.size() != b.tensors.size() || a.tensors.empty()) {
      std::fprintf(stderr, "compare_weights: the files hold %zu and %zu tensors\n", a.tensors.size(), b.tensors.size());
      return 2;
    }
    double worst = 0, all_diff = 0, all_norm = 0;
    std::string worst_name;
    for (const auto& [name, ta] : a.tensors) {
      const auto it = b.tensors.find(name);
      if (it == b.tensors.end() || it->second.shape() != ta.shape()) {
        std::fprintf(stderr, "compare_weights: %s is missing or differs in shape in %s\n", name.c_str(), argv[2]);
        return 2;
      }
      const std::vector<double> va = ta.to_vector<double>(), vb = it->second.to_vector<double>();
      double diff = 0, norm = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        diff += (va[i] - vb[i]) * (va[i] - vb[i]);
        norm += vb[i] * vb[i];
      }
      all_diff += diff;
      all_norm += norm;
      const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
      if (!(rel <= worst)) {  // NaN counts as worst
        worst = std::isnan(rel) ? INFINITY : rel;
        worst_name = name;
      }
    }
    double whole = std::sqrt(all_diff) / std::max(std::sqrt(all_norm), 1e-30);
    if (std::isnan(whole)) whole = INFINITY;
    std::printf("largest relative difference %.3g (%s), whole model %.3g, tolerance %.3g%s\n", worst,
                worst_name.c_str(), whole, tol, whole_model ? " (whole model)" : "");
    return (whole_model ? whole : worst) <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_weights: %s\n", e.what());
    return 2;
  }
}
