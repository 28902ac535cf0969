// mixtrain/dist/process_group.h: collectives between the processes of a data-parallel job.
//
// A ProcessGroup is the set of processes (ranks) that train one model together; DDP reduces
// gradients through it. Two implementations: "mpi" (the MPI world, when the process was started by
// mpirun and the library was built with MPI) and "single" (one process, where every collective is
// the identity). docs/distributed.md, section "Process groups", describes both.
//
// Ordering: collectives run in the order they are issued, and every rank must issue the same
// sequence (same kind, dtype and element count), as in MPI. Issue them from one thread, or serialize
// the issuing threads yourself: the group keeps issue order, not an order between racing threads.
//
// Tensors: contiguous, on the CPU. Collectives work on the tensor's memory in place; they bump its
// version counter (tensor.h) as every in-place write does.
#pragma once

#include <string_view>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::dist {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax };

// "sum", "avg", "max".
std::string_view to_string(ReduceOp op);

// A pending collective: wait() blocks until done (rethrows its error as mt::Error); the tensor it
// works on must stay alive and untouched until then. is_completed() never blocks; once it is true
// (or wait() has returned) the tensor holds the result. wait() may be called again: it returns at
// once, or throws the same error again. A Work may be dropped without wait(): the collective still
// runs (the group holds its own handle of the tensor until it is done).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "mpi", "single"

  // Sum, average or maximum over all ranks, in place, element by element. `tensor`: contiguous, on
  // the CPU, float32, float64, int64 or int32, or bfloat16/float16. Open MPI 4.1 has no 16-bit
  // float type, so 16-bit tensors are widened to an fp32 staging buffer, reduced in fp32 and rounded
  // back once (round to nearest even): the result is the 16-bit rounding of the fp32 result, which
  // can differ from (and is never worse than) reducing in 16-bit steps, and a 16-bit kSum whose fp32
  // result exceeds the 16-bit range becomes inf. kAvg sums, then divides by size() in the reduction
  // dtype (fp32 for 16-bit tensors); it is refused for integer tensors (the quotient would be
  // truncated: use kSum and divide). kMax does not promise to propagate NaN.
  // Validation errors (dtype, device, layout) are thrown here, before anything is issued; errors of
  // the collective itself come from Work::wait().
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) = 0;
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum) { all_reduce_async(tensor, op)->wait(); }
  // Copies root's tensor into every rank's tensor: contiguous, on the CPU, any dtype (moved as
  // bytes); the same shape and dtype on every rank. Blocks until done.
  virtual void broadcast(const Tensor& tensor, int root = 0) = 0;
  // Concatenates every rank's `input` into `output` in rank order: output[r * n .. (r+1) * n) is rank
  // r's input, n = input.numel(). Both contiguous, on the CPU, of one dtype (moved as bytes); output
  // holds size() * n elements; the same n and dtype on every rank. Blocks until done. At most 2 GiB
  // of input per rank per call (MPI counts are int): gather larger buffers in pieces.
  virtual void all_gather(const Tensor& input, const Tensor& output) = 0;
  // Returns when every rank has entered it (and every collective issued before it has completed).
  virtual void barrier() = 0;
  // One small value per rank, in rank order (the same vector on every rank).
  virtual std::vector<int64_t> all_gather(int64_t value) = 0;
  // One string per rank, in rank order (for error messages: names, shapes); lengths may differ.
  virtual std::vector<std::string> all_gather(const std::string& value) = 0;
  // Ends the whole job at once (every rank), printing `why` on this rank's stderr: MPI_Abort for
  // MPI, std::_Exit(exit_code) for a single process. Callable from any thread. Never returns.
  [[noreturn]] virtual void abort(int exit_code, const std::string& why) = 0;
};

// The process group of this process, created on first call (thread-safe) and kept until exit:
//  - the MPI world when this process was started by an MPI launcher with more than one process
//    (launched_by_mpi()) and the library was built with MPI (built_with_mpi());
//  - a single-process group (rank 0 of 1) otherwise, including under `mpirun -np 1`.
// Started by a launcher with several processes in a build without MPI, it throws mt::Error saying
// so, rather than letting N processes each train as rank 0 of 1 and overwrite each other's files.
//
// The MPI group, once created:
//  - runs every MPI call on its own communication thread (MPI_Init_thread there, MPI_Finalize there
//    at process exit, after all pending work);
//  - installs a std::terminate handler: a rank that dies of an uncaught exception prints it and
//    calls MPI_Abort, which ends every rank within seconds instead of leaving them waiting;
//  - aborts the job when one collective has not completed after MIXTRAIN_DIST_TIMEOUT seconds
//    (default 1800; 0 turns the watchdog off), naming the collective: a rank that stopped issuing,
//    or issued a different sequence, otherwise leaves the others waiting forever (MPI has no
//    timeout of its own).
ProcessGroup& world();

// True when this process was started by an MPI launcher with more than one process: Open MPI's
// OMPI_COMM_WORLD_SIZE, or PMI_SIZE (MPICH, Intel MPI), above 1, or a PMIX_RANK above 0.
bool launched_by_mpi();

// This process's rank among the launcher's processes on its host, for choosing its GPU:
// OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), then MPI_LOCALRANKID (MPICH, Intel MPI), then SLURM_LOCALID;
// 0 when none holds a number.
int launcher_local_rank();

// True when this library was built with MPI (MIXTRAIN_MPI, cmake/Mpi.cmake).
bool built_with_mpi();

// A single-process group (tests, and world() without a launcher).
std::unique_ptr<ProcessGroup> make_single_process_group();

}  // namespace mixtrain::dist
