// Every kernel table of the registry, constant-initialised to "no kernel", for_each_table (over
// table_list.h) and the one-time registration of the built-in backends.
#include <mutex>

#include "kernels/checked/register.h"
#include "kernels/conv.h"
#include "kernels/copy.h"
#include "kernels/cpu/register.h"
#if MIXTRAIN_WITH_CUDA
#include "kernels/cuda/register.h"
#endif
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/linalg.h"
#include "kernels/loss.h"
#include "kernels/nn.h"
#include "kernels/nn_batch_norm.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/shape_ops.h"
#include "kernels/table_list.h"

namespace mixtrain::kernels {

// ---- the tables (names are what "no kernel" errors show)
constinit DispatchTable<CopyFn> copy_table{"copy"};
constinit DispatchTable<FillFn> fill_table{"fill"};
constinit DispatchTable<RoundThroughFn> round_through_table{"round through 16 bits"};
constinit DispatchTable<RandomFillFn> random_fill_table{"random fill"};

#define MT_UNARY_TABLE(name) DispatchTable<UnaryFn>{#name},
constinit std::array<DispatchTable<UnaryFn>, static_cast<int>(UnaryOp::kCount)> unary_forward_tables{
    MT_FORALL_UNARY_KERNELS(MT_UNARY_TABLE)};
#undef MT_UNARY_TABLE
// Named after the op: errors read "gelu: no kernel for dtype ...".
#define MT_UNARY_TABLE(name) DispatchTable<UnaryBackwardFn>{#name},
constinit std::array<DispatchTable<UnaryBackwardFn>, static_cast<int>(UnaryOp::kCount)> unary_backward_tables{
    MT_FORALL_UNARY_KERNELS(MT_UNARY_TABLE)};
#undef MT_UNARY_TABLE
constinit DispatchTable<GeluForwardBackwardFn> gelu_forward_backward_table{"gelu"};
constinit std::array<DispatchTable<BinaryFn>, static_cast<int>(BinaryOp::kCount)> binary_tables{
    DispatchTable<BinaryFn>{"add"}, DispatchTable<BinaryFn>{"mul"}, DispatchTable<BinaryFn>{"div"},
    DispatchTable<BinaryFn>{"pow"}};
// Named after their forward op.
constinit std::array<DispatchTable<TernaryFn>, static_cast<int>(TernaryOp::kCount)> ternary_tables{
    DispatchTable<TernaryFn>{"div"}, DispatchTable<TernaryFn>{"pow"}, DispatchTable<TernaryFn>{"pow"}};
constinit DispatchTable<WhereFn> where_table{"where"};
constinit DispatchTable<MaskedFillFn> masked_fill_table{"masked_fill"};
constinit DispatchTable<CompareFn> eq_table{"eq"};
constinit std::array<DispatchTable<CompareScalarFn>, static_cast<int>(CompareOp::kCount)> compare_scalar_tables{
    DispatchTable<CompareScalarFn>{"gt"}, DispatchTable<CompareScalarFn>{"lt"}};

constinit std::array<DispatchTable<ReduceFn>, static_cast<int>(ReduceOp::kCount)> reduce_tables{
    DispatchTable<ReduceFn>{"sum"}, DispatchTable<ReduceFn>{"amax"}};
constinit DispatchTable<ArgmaxFn> argmax_table{"argmax"};
constinit DispatchTable<ScatterAddRowsFn> scatter_add_rows{"index_select_backward"};

constinit DispatchTable<MatmulFn> matmul_table{"matmul"};
constinit DispatchTable<Conv2dForwardFn> conv2d_forward_table{"conv2d"};
constinit DispatchTable<Conv2dBackwardFn> conv2d_backward_table{"conv2d backward"};

constinit DispatchTable<SoftmaxFwdFn> softmax_fwd{"softmax"};
constinit DispatchTable<SoftmaxBwdFn> softmax_bwd{"softmax_backward"};
constinit DispatchTable<AttentionFwdFn> attention_fwd{"scaled_dot_product_attention"};
constinit DispatchTable<AttentionBwdFn> attention_bwd{"scaled_dot_product_attention_backward"};
constinit DispatchTable<LayerNormFwdFn> layer_norm_fwd{"layer_norm"};
constinit DispatchTable<LayerNormBwdFn> layer_norm_bwd{"layer_norm_backward"};
constinit DispatchTable<MaxPool2dFwdFn> max_pool2d_fwd{"max_pool2d"};
constinit DispatchTable<MaxPool2dBwdFn> max_pool2d_bwd{"max_pool2d_backward"};
constinit DispatchTable<AvgPool2dFwdFn> avg_pool2d_fwd{"avg_pool2d"};
constinit DispatchTable<AvgPool2dBwdFn> avg_pool2d_bwd{"avg_pool2d_backward"};
constinit DispatchTable<DropoutFwdFn> dropout_fwd{"dropout"};
constinit DispatchTable<DropoutBwdFn> dropout_bwd{"dropout_backward"};
constinit DispatchTable<BatchNormStatsFn> batch_norm_stats{"batch_norm"};
constinit DispatchTable<BatchNormForwardFn> batch_norm_forward{"batch_norm"};
constinit DispatchTable<BatchNormBackwardFn> batch_norm_backward{"batch_norm backward"};
constinit DispatchTable<BatchNormUpdateStatsFn> batch_norm_update_stats{"batch_norm running-stats update"};
constinit DispatchTable<ClassLossFwdFn> class_loss_fwd{"cross_entropy"};
constinit DispatchTable<ClassLossBwdFn> class_loss_bwd{"cross_entropy_backward"};
constinit DispatchTable<PointwiseLossFwdFn> pointwise_loss_fwd{"pointwise_loss"};
constinit DispatchTable<PointwiseLossBwdFn> pointwise_loss_bwd{"pointwise_loss_backward"};

constinit DispatchTable<ScaleAndCheckFn> scale_and_check_table{"multi-tensor scale and check"};
constinit DispatchTable<NormPartialsFn> norm_partials_table{"multi-tensor norm"};
constinit DispatchTable<SgdStepFn> sgd_step_table{"sgd step"};
constinit DispatchTable<AdamStepFn> adam_step_table{"adam step"};
constinit DispatchTable<UnpackMasterFn> unpack_master_table{"unpack master"};
constinit DispatchTable<PackMasterFn> pack_master_table{"pack master"};
constinit DispatchTable<AmpUnscaleFn> amp_unscale_table{"grad scaler unscale"};
constinit DispatchTable<AmpUpdateScaleFn> amp_update_scale_table{"grad scaler update"};

constinit DispatchTable<MatmulFn> matmul_fp32_route_table{"matmul (fp32 route)"};
constinit DispatchTable<UsesFp32RouteFn> uses_fp32_route_table{"matmul route"};
constinit DispatchTable<SumRowsFn> sum_rows_table{"sum_rows"};
constinit DispatchTable<SumRowsFn> sum_to_size_table{"sum_to_size"};
constinit DispatchTable<FindBadIndexFn> find_bad_index_table{"index check"};
constinit DispatchTable<GatherRowsFn> gather_rows_table{"index_select"};
constinit DispatchTable<Fp8QuantizeFn> fp8_quantize_table{"fp8 quantize"};
constinit DispatchTable<Fp8DequantizeFn> fp8_dequantize_table{"fp8 dequantize"};

void for_each_table(void (*visit)(DispatchTableBase& table, void* context), void* context) {
  visit_tables([&]<auto& Holder, size_t I>() { visit(table_at<Holder, I>(), context); });
}

// ---- registration
namespace {
std::once_flag builtin_once;
}

void register_builtin_kernels() {
  std::call_once(builtin_once, [] {
    Registry cpu(kCPU);
    register_cpu(cpu);
    Registry checked(kChecked);
    register_checked(checked);
#if MIXTRAIN_WITH_CUDA
    Registry cuda(kCUDA);
    register_cuda(cuda);
#endif
  });
}

void register_kernels(DeviceType device, void (*register_fn)(Registry&)) {
  MT_CHECK(device != kCPU, "register_kernels: the cpu kernels are built in");
  register_builtin_kernels();
  Registry registry(device);
  register_fn(registry);
}

DispatchTableBase::AnyFn DispatchTableBase::lookup_after_registration(Device device, DType dtype) const {
  register_builtin_kernels();
  AnyFn fn = slot(device.type, dtype).load(std::memory_order_acquire);
  if (fn == nullptr) missing(device, dtype);
  return fn;
}

void DispatchTableBase::missing(Device device, DType dtype) const {
  MT_FAIL(op_, ": no kernel for dtype ", dtype, " on device ", device);
}

}  // namespace mixtrain::kernels
