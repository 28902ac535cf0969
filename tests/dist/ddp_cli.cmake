# `mpirun -np 2 mixtrain train` against one process (docs/distributed.md):
#   1. 2 processes x batch 64 end with the weights of 1 process x batch 128, to a relative
#      difference of TOL (fp32: 1e-4) -- the same 20 steps over the same samples;
#   2. only rank 0 wrote files, and summary.json states world_size 2 and global_batch_size 128;
#   3. a 2-process run resumed from its checkpoint ends with the weights of the uninterrupted one,
#      and a 2-process run of the model moved to the checked device ends with its bytes;
#   4. a rank that is killed ends the whole job, non-zero, within seconds (no hang).
#   -DMIXTRAIN=path -DMPIEXEC=path -DCOMPARE=path -DWORK_DIR=dir [-DPRECISION=fp32] [-DTOL=1e-4] [-DDATA=...]
cmake_minimum_required(VERSION 3.22)
if(NOT DEFINED PRECISION)
  set(PRECISION fp32)
endif()
if(NOT DEFINED TOL)
  set(TOL 1e-4)
endif()
if(NOT DEFINED DATA)
  set(DATA fashion-mnist)
endif()
set(mpi ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2)
set(common train --model mlp --data ${DATA} --precision ${PRECISION} --steps 20 --seed 0 --threads 1)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

# 1. Two processes, batch 64 each, and one process, batch 128.
run("the 2-process run" ${mpi} ${MIXTRAIN} ${common} --batch-size 64 --out ${WORK_DIR}/two)
if(NOT last_out MATCHES "64 per process x 2 processes = 128")
  message(FATAL_ERROR "rank 0's banner does not state the global batch:\n${last_out}")
endif()
run("the 1-process run" ${MIXTRAIN} ${common} --batch-size 128 --out ${WORK_DIR}/one)
run("the weight comparison" ${COMPARE} ${WORK_DIR}/two/model.safetensors ${WORK_DIR}/one/model.safetensors ${TOL})
message(STATUS "2 processes vs 1: ${last_out}")

# 2. What was written.
file(READ ${WORK_DIR}/two/summary.json summary)
string(JSON world GET "${summary}" world_size)
string(JSON global GET "${summary}" global_batch_size)
if(NOT world EQUAL 2 OR NOT global EQUAL 128)
  message(FATAL_ERROR "summary.json: world_size ${world}, global_batch_size ${global} (expected 2, 128)")
endif()
file(STRINGS ${WORK_DIR}/two/metrics.jsonl lines)
list(LENGTH lines n)
if(NOT n EQUAL 20)
  message(FATAL_ERROR "metrics.jsonl has ${n} lines, expected one per step (20): a second writer?")
endif()

# 3. Resume: 10 steps with a checkpoint, then the rest from it, against the uninterrupted run.
run("the first half" ${mpi} ${MIXTRAIN} ${common} --batch-size 64 --steps 20 --checkpoint-every 10
    --out ${WORK_DIR}/resumed)
file(REMOVE ${WORK_DIR}/resumed/model.safetensors ${WORK_DIR}/resumed/checkpoint.safetensors)
run("the resumed run" ${mpi} ${MIXTRAIN} ${common} --batch-size 64 --resume ${WORK_DIR}/resumed/checkpoint-10.safetensors
    --out ${WORK_DIR}/resumed)
run("the resumed comparison" ${COMPARE} ${WORK_DIR}/resumed/model.safetensors ${WORK_DIR}/two/model.safetensors 0)

# 3b. The model on the checked device (the GPU's stand-in): host-staged buckets, the CPU run's bytes.
set(ENV{MIXTRAIN_CHECKED_DEVICE} 1)
run("the 2-process run on the checked device" ${mpi} ${MIXTRAIN} ${common} --batch-size 64 --device checked
    --out ${WORK_DIR}/two_checked)
run("the checked-device comparison" ${COMPARE} ${WORK_DIR}/two_checked/model.safetensors ${WORK_DIR}/two/model.safetensors 0)
message(STATUS "2 processes on the checked device = 2 processes on the cpu: ${last_out}")

# 4. A rank that dies: rank 1 is SIGKILLed by a watchdog 3 s in; the job must end non-zero soon.
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${mpi} sh -c "if [ \"\$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 3; kill -9 \$\$) & fi; exec ${MIXTRAIN} train --model mlp --data synthetic:65536 --steps 100000 --batch-size 64 --threads 1 --out ${WORK_DIR}/killed"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
if(rc EQUAL 0 OR rc MATCHES "timeout")
  message(FATAL_ERROR "a killed rank did not end the job (${rc}) after ${seconds} s:\n${out}\n${err}")
endif()
if(seconds GREATER 60)
  message(FATAL_ERROR "the job took ${seconds} s to end after a rank was killed")
endif()
message(STATUS "a killed rank ended the job in ${seconds} s (exit ${rc})")
