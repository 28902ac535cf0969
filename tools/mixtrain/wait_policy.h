// How the mixtrain tool's OpenMP threads wait at barriers (docs/performance.md, "Shared machines").
#pragma once

namespace mixtrain::cli {

// With libgomp's default wait policy, a thread that reaches a barrier first spins for a while before
// it sleeps. On a machine whose cores another busy process shares, the spinning threads take the
// cores from the descheduled threads they wait for: a step next to another multithreaded run took
// 6-18x its idle time, against 1.7-1.9x when waiting threads sleep at once (OMP_WAIT_POLICY=passive),
// which cost 0-5% on an idle machine in the same measurements. libgomp reads the policy from the
// environment once, when it is loaded (before main), so the tool sets it and runs itself again:
// unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is already set (the user's choice stands), this sets
// OMP_WAIT_POLICY=passive and execs /proc/self/exe with the same arguments. If the exec fails the
// run continues with the default policy. Call first thing in main.
void apply_default_wait_policy(char** argv);

// The policy in force for this process: the value of OMP_WAIT_POLICY, "spincount=<N>" for
// GOMP_SPINCOUNT, or "default".
const char* wait_policy();

}  // namespace mixtrain::cli
