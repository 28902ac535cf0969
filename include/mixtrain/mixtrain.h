// mixtrain/mixtrain.h: the whole public API. `namespace mt = mixtrain;` is the usual alias.
#pragma once

#include "mixtrain/autograd.h"
#include "mixtrain/device.h"
#include "mixtrain/dtype.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/half.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/op_id.h"
#include "mixtrain/ops/elementwise.h"
#include "mixtrain/ops/linalg.h"
#include "mixtrain/ops/reduce.h"
#include "mixtrain/ops/shape_ops.h"
#include "mixtrain/random.h"
#include "mixtrain/shape.h"
#include "mixtrain/tensor.h"
