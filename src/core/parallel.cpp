// src/core/parallel.cpp: the thread count (mixtrain/parallel.h), on OpenMP.
#include "mixtrain/parallel.h"

#include <omp.h>

#include "mixtrain/error.h"

namespace mixtrain {

void set_num_threads(int n) {
  MT_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: the thread count must be 1 to ", kMaxThreads, ", got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

int num_processors() { return omp_get_num_procs(); }

}  // namespace mixtrain
