// One line per parameter for the ranks' same-model checks (parameter_signature.h).
#include "dist/parameter_signature.h"

#include <sstream>

#include "mixtrain/error.h"

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

namespace {

// The first line where two signatures differ (for the error message).
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(sa, la)), gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (!ga || !gb || la != lb) return "\"" + la + "\" on rank 0, \"" + lb + "\" here";
  }
}

}  // namespace

void check_same_parameters(std::string_view who, const std::vector<std::string>& names,
                           const std::vector<Tensor>& params, ProcessGroup& group) {
  const std::vector<std::string> all = group.all_gather(parameter_signature(names, params));
  for (int r = 0; r < group.size(); ++r)
    MT_CHECK(all[r] == all[0], who, ": rank ", r, "'s parameters differ from rank 0's: ", first_difference(all[0], all[r]),
             "; every rank must hold the same model");
}

}  // namespace mixtrain::dist::detail
