// The choice between the process group and the device collectives, and the communicator's bootstrap,
// shared by DistributedDataParallel and ZeroRedundancyOptimizer (dist/device_bootstrap.h).
#include "dist/device_bootstrap.h"

#include <vector>

#include "mixtrain/error.h"
#include "mixtrain/factory.h"

namespace mixtrain::dist::detail {
namespace {

ReductionPath choose_path(const PathUser& user, ReductionPath wanted, Device device, const ProcessGroup& group) {
  switch (wanted) {
    case ReductionPath::kProcessGroup: return ReductionPath::kProcessGroup;
    case ReductionPath::kDeviceCollectives:
      MT_CHECK(!device.is_cpu(), user.who, ": ", user.option, " = ", to_string(wanted),
               ", but the parameters are on the cpu, which the process group ", user.verb, " in place");
      require_device_collectives(device.type);  // throws, saying why there are none
      return ReductionPath::kDeviceCollectives;
    case ReductionPath::kAuto: break;
  }
  if (device.is_cpu() || group.size() < 2 || device_collectives(device.type) == nullptr)
    return ReductionPath::kProcessGroup;
  return ReductionPath::kDeviceCollectives;
}

}  // namespace

ReductionPath agree_on_path(const PathUser& user, ReductionPath wanted, Device device, ProcessGroup& group) {
  const ReductionPath path = choose_path(user, wanted, device, group);
  const std::vector<int64_t> paths = group.all_gather(static_cast<int64_t>(path));
  for (int r = 0; r < group.size(); ++r)
    MT_CHECK(paths[r] == paths[0], user.who, ": rank ", r, " ", user.verb, " through ",
             to_string(static_cast<ReductionPath>(paths[r])), ", rank 0 through ",
             to_string(static_cast<ReductionPath>(paths[0])), "; every rank must take the same path");
  return path;
}

std::unique_ptr<DeviceCommunicator> connect_device_communicator(const PathUser& user, ProcessGroup& group,
                                                                Device device) {
  DeviceCollectives& collectives = require_device_collectives(device.type);
  std::vector<uint8_t> id;
  if (group.rank() == 0) id = collectives.create_unique_id();
  const int64_t n = group.all_gather(static_cast<int64_t>(id.size()))[0];  // the others learn its length
  MT_CHECK(n > 0, user.who, ": ", collectives.name(), " made an empty unique id on rank 0");
  Tensor bytes = group.rank() == 0 ? from_vector(id, {n}, {.dtype = kUInt8, .device = kCPU})
                                   : zeros({n}, {.dtype = kUInt8, .device = kCPU});
  group.broadcast(bytes, 0);
  id = bytes.to_vector<uint8_t>();
  return collectives.connect(id, group.rank(), group.size(), device);
}

}  // namespace mixtrain::dist::detail
