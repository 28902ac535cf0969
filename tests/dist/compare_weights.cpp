// compare_weights A.safetensors B.safetensors TOLERANCE: the largest relative difference
// ||a - b|| / ||b|| over the tensors the two files share (the same names, shapes and dtypes are
// required), printed; exit 0 when it is at most TOLERANCE, 1 when above, 2 on unusable input.
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
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_weights A.safetensors B.safetensors TOLERANCE\n");
    return 2;
  }
  try {
    const double tol = std::stod(argv[3]);
    const mt::io::SafetensorsFile a = mt::io::load_safetensors(argv[1]), b = mt::io::load_safetensors(argv[2]);
    if (a.tensors.size() != b.tensors.size() || a.tensors.empty()) {
      std::fprintf(stderr, "compare_weights: the files hold %zu and %zu tensors\n", a.tensors.size(), b.tensors.size());
      return 2;
    }
    double worst = 0;
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
      const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
      if (!(rel <= worst)) {  // NaN counts as worst
        worst = std::isnan(rel) ? INFINITY : rel;
        worst_name = name;
      }
    }
    std::printf("largest relative difference %.3g (%s), tolerance %.3g\n", worst, worst_name.c_str(), tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_weights: %s\n", e.what());
    return 2;
  }
}
