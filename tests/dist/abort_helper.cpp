// A two-rank MPI job that goes wrong on purpose, for tests/dist/abort_job.cmake (run under mpirun).
//   abort_helper throw    rank 1 throws an uncaught mt::Error after a barrier; rank 0 waits in a
//                         second barrier that rank 1 never reaches. The terminate handler that
//                         dist::world() installs must end the job.
//   abort_helper timeout  rank 1 stops issuing collectives (it sleeps for a minute); rank 0 waits in
//                         a barrier. The watchdog (MIXTRAIN_DIST_TIMEOUT, set short by the test)
//                         must end the job.
// Without either, rank 0 would wait forever: MPI has no timeout of its own.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "mixtrain/dist/process_group.h"
#include "mixtrain/error.h"

namespace dist = mixtrain::dist;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "timeout") {
    std::fprintf(stderr, "usage: mpirun -np 2 abort_helper throw|timeout\n");
    return 2;
  }
  dist::ProcessGroup& pg = dist::world();
  std::printf("rank %d of %d (%s) started\n", pg.rank(), pg.size(), pg.backend_name().c_str());
  std::fflush(stdout);
  pg.barrier();
  if (pg.rank() == 1) {
    if (mode == "throw") MT_FAIL("abort_helper: rank 1 throws on purpose");
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  pg.barrier();  // never completes
  std::printf("rank 0 passed a barrier that rank 1 never entered\n");
  return 0;
}
