// Printing of tensors' values (PyTorch-like, abbreviated for large tensors): a copy to the host
// first, so it lives in the ops layer with the other Tensor methods that run kernels.
#include <iomanip>
#include <ostream>
#include <sstream>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain {

namespace {

constexpr int64_t kEdgeItems = 3;
constexpr int64_t kSummariseAbove = 1000;

void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape, int dim, int64_t& offset,
               int64_t stride_elems, bool summarise, bool is_float, int indent) {
  const int64_t n = shape[dim];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "..., ";
      i = n - kEdgeItems - 1;
      continue;
    }
    int64_t inner = stride_elems / std::max<int64_t>(n, 1);
    int64_t start = offset + i * inner;
    if (dim == shape.size() - 1) {
      double x = v[start];
      if (is_float) os << std::setprecision(4) << x; else os << static_cast<int64_t>(x);
    } else {
      int64_t o = start;
      print_rec(os, v, shape, dim + 1, o, inner, summarise, is_float, indent + 1);
    }
    if (i + 1 < n) os << (dim == shape.size() - 1 ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  os << "tensor(";
  if (t.dim() == 0) {
    os << (t.is_floating_point() ? t.item<double>() : static_cast<double>(t.item<int64_t>()));
  } else {
    std::vector<double> v = t.to_vector<double>();
    int64_t offset = 0;
    print_rec(os, v, t.shape(), 0, offset, t.numel(), t.numel() > kSummariseAbove, t.is_floating_point(), 7);
  }
  os << ", shape=" << t.shape() << ", dtype=" << t.dtype();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace mixtrain
