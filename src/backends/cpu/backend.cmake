# The CPU backend: always built. Its GEMMs and convolutions are oneDNN's (kernels/onednn/).
find_package(dnnl REQUIRED)
list(APPEND BACKEND_LIBRARIES DNNL::dnnl)
# The attention GEMM's portable path spends its time in one short rank-1-update loop; where the
# linker happens to place it decides whether it straddles a 64-byte fetch line, which moved the
# GPT step by 12-19% on a Zen 3 between two builds of identical object code. Aligned loop heads
# make its speed independent of the code around it.
set_source_files_properties(${BACKEND_DIR}/kernels/attention_gemm.cpp PROPERTIES COMPILE_OPTIONS
  "$<$<CXX_COMPILER_ID:GNU,Clang>:-falign-loops=64>")
# The row primitives' exp (softmax, log-softmax, cross-entropy) has range selects that GCC will not
# if-convert in its AVX2 and baseline builds while FP operations may trap (AVX-512's masked stores
# let it), so those loops stayed scalar and softmax ran 3x slower at AVX2 than with the flag
# (docs/performance.md#avx2-and-avx-512-per-lane).
# mixtrain never unmasks FP exceptions, so the flag changes no value; Clang assumes it by default.
set_source_files_properties(${BACKEND_DIR}/kernels/nn_vec.cpp PROPERTIES COMPILE_OPTIONS
  "$<$<CXX_COMPILER_ID:GNU>:-fno-trapping-math>")
