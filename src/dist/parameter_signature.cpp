// One line per parameter for the ranks' same-model checks (parameter_signature.h).
#include "dist/parameter_signature.h"

#include <sstream>

namespace mixtrain::dist::detail {

std::string parameter_line(const std::string& name, DType dtype, const Shape& shape, DeviceType device) {
  std::ostringstream s;
  s << name << ' ' << dtype << ' ' << shape << " on " << to_string(device) << '\n';
  return s.str();
}

std::string parameter_signature(const std::vector<std::string>& names, const std::vector<Tensor>& params) {
  std::string out;
  for (size_t i = 0; i < params.size(); ++i)
    out += parameter_line(names[i], params[i].dtype(), params[i].shape(), params[i].device().type);
  return out;
}

}  // namespace mixtrain::dist::detail
