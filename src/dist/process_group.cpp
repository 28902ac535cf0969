// The process-group front: argument checks, the launcher's environment, the single-process group
// and world(). The MPI group is in src/dist/mpi/ (built only with MPI).
#include "mixtrain/dist/process_group.h"

#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "dist/process_group_internal.h"
#include "mixtrain/error.h"

namespace mixtrain::dist {

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

namespace detail {

namespace {

void check_cpu_contiguous(const Tensor& tensor, const char* what) {
  MT_CHECK(tensor.defined(), "dist: ", what, " of an undefined tensor");
  MT_CHECK(tensor.device().is_cpu(), "dist: ", what, " needs a cpu tensor (this ", tensor.dtype(),
           " tensor of shape ", tensor.shape(), " is on ", tensor.device(),
           "): copy it to the host, or let DistributedDataParallel reduce a device model's gradients");
  MT_CHECK(tensor.is_contiguous(), "dist: ", what, " needs a contiguous tensor, got shape ", tensor.shape(),
           " with strides ", tensor.strides(), ": reduce a .contiguous() copy and copy it back");
}

// A non-negative decimal integer, or -1.
long long parse_count(const char* text) {
  if (text == nullptr || *text == '\0') return -1;
  long long value = -1;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc{} || ptr != end || value < 0) return -1;
  return value;
}

}  // namespace

void check_all_reduce(const Tensor& tensor, ReduceOp op) {
  check_cpu_contiguous(tensor, "all_reduce");
  const DType t = tensor.dtype();
  MT_CHECK(t == kFloat32 || t == kFloat64 || t == kInt64 || t == kInt32 || t == kBFloat16 || t == kFloat16,
           "dist: all_reduce does not reduce ", t,
           " tensors; it takes float32, float64, int64, int32, bfloat16 and float16");
  MT_CHECK(op != ReduceOp::kAvg || is_floating(t), "dist: all_reduce avg needs a floating tensor, got ", t,
           " (an integer average would be truncated): reduce with sum and divide");
}

void check_broadcast(const Tensor& tensor, int root, int size) {
  check_cpu_contiguous(tensor, "broadcast");
  MT_CHECK(root >= 0 && root < size, "dist: broadcast root ", root, " is not a rank of this group of ", size,
           " (ranks 0..", size - 1, ")");
}

void check_all_gather(const Tensor& input, const Tensor& output, int size) {
  check_cpu_contiguous(input, "all_gather input");
  check_cpu_contiguous(output, "all_gather output");
  MT_CHECK(input.dtype() == output.dtype(), "dist: all_gather of a ", input.dtype(), " input into a ", output.dtype(),
           " output: they must have one dtype");
  MT_CHECK(output.numel() == input.numel() * size, "dist: all_gather of ", input.numel(), " elements per rank over ",
           size, " ranks needs an output of ", input.numel() * size, " elements, got ", output.numel());
  MT_CHECK(input.nbytes() <= static_cast<size_t>(INT_MAX), "dist: all_gather of ", input.nbytes(),
           " bytes per rank: at most 2 GiB per call, gather it in pieces");
}

int launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const long long n = parse_count(std::getenv(var));
    if (n > 0) return n > 1'000'000 ? 1'000'000 : static_cast<int>(n);
  }
  return 0;
}

namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Rank 0 of 1: a reduction over one rank is the tensor itself (an average divides by 1), a
// broadcast from rank 0 leaves it as it is. The arguments are checked as the MPI group checks them,
// so code that runs here runs there.
class SingleProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    check_all_reduce(tensor, op);
    return completed_work();
  }
  void broadcast(const Tensor& tensor, int root) override { check_broadcast(tensor, root, 1); }
  void barrier() override {}
  std::vector<int64_t> all_gather(int64_t value) override { return {value}; }
  std::vector<std::string> all_gather(const std::string& value) override { return {value}; }
  void all_gather(const Tensor& input, const Tensor& output) override {
    check_all_gather(input, output, 1);
    if (input.raw_data() != output.raw_data()) std::memcpy(output.raw_data(), input.raw_data(), input.nbytes());
    output.bump_version();
  }
  [[noreturn]] void abort(int exit_code, const std::string& why) override {
    std::fprintf(stderr, "mixtrain: aborting: %s\n", why.c_str());
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }
};

}  // namespace

std::shared_ptr<Work> completed_work() {
  static const std::shared_ptr<Work> done = std::make_shared<CompletedWork>();
  return done;
}

std::unique_ptr<ProcessGroup> make_world_group() {
  if (!launched_by_mpi()) return make_single_process_group();
#if defined(MIXTRAIN_WITH_MPI)
  return make_mpi_world_group();
#else
  const int n = launcher_world_size();
  MT_FAIL("dist: this process was started by an MPI launcher (mpirun/mpiexec) as one of ",
          n > 0 ? std::to_string(n) : std::string("several"),
          " processes, but this build of mixtrain has no MPI, so each process would train alone as rank 0 of 1 "
          "and overwrite the others' files. Rebuild with MPI (apt-get install libopenmpi-dev openmpi-bin; "
          "cmake -DMIXTRAIN_MPI=ON), or run a single process without mpirun");
#endif
}

}  // namespace detail

bool launched_by_mpi() {
  if (detail::launcher_world_size() > 1) return true;
  // PMIx-only launchers (srun --mpi=pmix) name the rank but not always the size: a rank above 0
  // means there are others.
  return detail::parse_count(std::getenv("PMIX_RANK")) > 0;
}

int launcher_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const long long r = detail::parse_count(std::getenv(var));
    if (r >= 0) return r > 1'000'000 ? 0 : static_cast<int>(r);
  }
  return 0;
}

bool built_with_mpi() {
#if defined(MIXTRAIN_WITH_MPI)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ProcessGroup> make_single_process_group() { return std::make_unique<detail::SingleProcessGroup>(); }

ProcessGroup& world() {
  // Created on first use (thread-safe), destroyed at exit in reverse order of creation: objects
  // made before the first world() call outlive it. The MPI group finalizes MPI in its destructor.
  static const std::unique_ptr<ProcessGroup> group = detail::make_world_group();
  return *group;
}

}  // namespace mixtrain::dist
