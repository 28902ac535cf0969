#include "mixtrain/shape.h"

#include <ostream>
#include <sstream>

namespace mixtrain {

std::string Shape::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

Shape contiguous_strides(const Shape& shape) {
  Shape st = Shape::filled(shape.size(), 1);
  int64_t acc = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<int64_t>(shape[d], 1);
  }
  return st;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  const int64_t n = std::max(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, like PyTorch
  MT_CHECK(dim >= -n && dim < n, op, ": dimension ", dim, " is out of range for a tensor with ", ndim,
           " dims (expected [", -n, ", ", n - 1, "])");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " do not broadcast (dim ", i, ": ", da,
             " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace mixtrain
