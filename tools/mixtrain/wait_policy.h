// How the mixtrain tool's OpenMP threads wait at barriers (docs/performance.md, "Shared machines").
#pragma once

#include <cstdint>
#include <string>

namespace mixtrain::cli {

// With libgomp's default wait policy a thread that reaches a barrier first spins for a while
// before it sleeps. On an idle machine that saves a wake-up per parallel region; on a machine whose
// cores another busy process shares, the spinning threads take the cores from the descheduled
// threads they wait for: a step next to another multithreaded run took up to 18x its idle time,
// against 1.7-1.9x when waiting threads sleep at once (OMP_WAIT_POLICY=passive), which in turn
// costs an idle machine up to about 12% (more regions per step cost more wake-ups).
//
// So the tool looks before it runs: unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (the user's
// choice stands), it samples /proc/stat for 50 ms and, when other processes kept at least half a
// core busy, sets OMP_WAIT_POLICY=passive and execs /proc/self/exe with the same arguments
// (libgomp reads the policy once, when it is loaded, before main). On an idle machine it keeps
// libgomp's default. A neighbour that starts later is not seen: on a shared machine set
// OMP_WAIT_POLICY=passive yourself. If the exec fails the run continues with the default policy.
// Call first thing in main.
void apply_default_wait_policy(char** argv);

// The policy in force for this process: "auto:passive" or "auto:spin" (chosen by the tool), else
// the value of OMP_WAIT_POLICY, "spincount=<N>" for GOMP_SPINCOUNT, or "default".
std::string wait_policy();

// Busy CPU time of the whole machine from two readings of /proc/stat's "cpu" line: the fraction of
// one core that was busy between them, e.g. 1.0 for one core fully busy (0 when the line cannot be
// parsed or no time passed). Exposed for tests.
double busy_cores(const std::string& cpu_line_before, const std::string& cpu_line_after);

}  // namespace mixtrain::cli
