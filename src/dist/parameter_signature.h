// src/dist/parameter_signature.h (internal): how the ranks of a data-parallel job check that they
// hold the same model (DistributedDataParallel, ZeroRedundancyOptimizer): one line per parameter.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/device.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/dtype.h"
#include "mixtrain/shape.h"
#include "mixtrain/tensor.h"

namespace mixtrain::dist::detail {

// "<name> <dtype> <shape> on <device type>\n". The device's type, not its index: one process per GPU
// of a node puts rank r's model on cuda:r, and those ranks hold the same model.
std::string parameter_line(const std::string& name, DType dtype, const Shape& shape, DeviceType device);

// The lines of every parameter, in order.
std::string parameter_signature(const std::vector<std::string>& names, const std::vector<Tensor>& params);

// Collective: every rank holds the same list (count, names, dtypes, shapes, device type), or every
// rank throws "<who>: rank r's parameters differ from rank 0's: "<line>" on rank 0, "<line>" here".
void check_same_parameters(std::string_view who, const std::vector<std::string>& names,
                           const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace mixtrain::dist::detail
