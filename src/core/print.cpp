// Printing of dtypes and devices, and describe() (a tensor's shape, dtype and device, for messages);
// printing a tensor's values reads them from its device and is in the ops layer (src/ops/print.cpp).
#include <iomanip>
#include <ostream>
#include <sstream>

#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/tensor.h"

namespace mixtrain {

std::ostream& operator<<(std::ostream& os, DType t) { return os << to_string(t); }

std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << to_string(t); }

std::ostream& operator<<(std::ostream& os, Device d) {
  os << d.type;
  if (!d.is_cpu()) os << ':' << d.index;
  return os;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "(undefined tensor)";
  std::ostringstream os;
  os << t.shape() << ' ' << t.dtype();
  if (!t.device().is_cpu()) os << " on " << t.device();
  return os.str();
}

}  // namespace mixtrain
