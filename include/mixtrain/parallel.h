// mixtrain/parallel.h: the number of threads mixtrain's CPU kernels (and oneDNN's) run on.
//
// mixtrain and oneDNN share one OpenMP thread pool. The count applies to kernels started from the
// calling thread (OpenMP keeps it per thread; set it from the thread that trains). Results never
// depend on it: every kernel splits its work at fixed positions.
#pragma once

namespace mixtrain {

// The most threads set_num_threads accepts.
inline constexpr int kMaxThreads = 1024;

// Runs CPU kernels on `n` threads (1 <= n <= kMaxThreads, else mt::Error).
void set_num_threads(int n);
// The number of threads the next kernel started from this thread will use.
int get_num_threads();
// The number of logical processors available to this process.
int num_processors();

}  // namespace mixtrain
