// Pieces shared by the process groups (src/dist/process_group.cpp, src/dist/mpi/): the argument
// checks every implementation applies the same way, and the factory of the world group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mixtrain/dist/process_group.h"

namespace mixtrain::dist::detail {

// Throws mt::Error unless `tensor` can be all-reduced with `op`: defined, on the CPU, contiguous,
// a supported dtype, and floating for kAvg.
void check_all_reduce(const Tensor& tensor, ReduceOp op);
// Throws mt::Error unless `input` can be all-gathered into `output` in a group of `size` ranks.
void check_all_gather(const Tensor& input, const Tensor& output, int size);
// Throws mt::Error unless `tensor` can be broadcast from `root` in a group of `size` ranks.
void check_broadcast(const Tensor& tensor, int root, int size);

// The number of processes the launcher started, from its environment: OMPI_COMM_WORLD_SIZE, then
// PMI_SIZE; 0 when neither is set (or holds no positive number).
int launcher_world_size();

// A Work that is already done.
std::shared_ptr<Work> completed_work();

// What world() creates: the MPI group when launched_by_mpi() (throws in a build without MPI), else
// a single-process group.
std::unique_ptr<ProcessGroup> make_world_group();

#if defined(MIXTRAIN_WITH_MPI)
// src/dist/mpi/mpi_process_group.cpp: initialises MPI (on the group's communication thread).
std::unique_ptr<ProcessGroup> make_mpi_world_group();
#endif

}  // namespace mixtrain::dist::detail
