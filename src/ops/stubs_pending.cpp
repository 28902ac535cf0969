// Temporary: replaced by the elementwise and reduce families.
#include "mixtrain/ops/reduce.h"
#include "mixtrain/error.h"
namespace mixtrain {
Tensor sum_to(const Tensor& x, const Shape& shape) { MT_FAIL("sum_to: not implemented yet"); }
Tensor& Tensor::add_(const Tensor& other, double alpha) { MT_FAIL("add_: not implemented yet"); }
Tensor& Tensor::mul_(double value) { MT_FAIL("mul_: not implemented yet"); }
}
