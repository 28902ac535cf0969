// src/core/isa_target.h (internal): the function attributes of the x86 instruction-set levels, one
// per level, each enabling exactly what cpu::isa() checks for that level (src/core/cpu.cpp), so that
// a function built for a level runs wherever run-time dispatch picks it:
//   MT_TARGET_F16C        AVX + F16C (half conversions on CPUs below the AVX2 level)
//   MT_TARGET_AVX2        cpu::Isa::kAvx2: AVX2, FMA, F16C
//   MT_TARGET_AVX2_NO_FMA the AVX2 level with FMA left off, for code whose bits must not depend on
//                         the compiler fusing a * b + c (GCC fuses it, intrinsics included, wherever
//                         FMA is enabled): the AVX2 AdamW, which gives its scalar and CUDA versions'
//                         bits, and the conversions and pooling written before FMA was in reach
//   MT_TARGET_AVX512      cpu::Isa::kAvx512: + AVX-512 F, BW, VL, DQ
//   MT_TARGET_AVX512BF16  cpu::Isa::kAvx512Bf16: + AVX512_BF16
//   MT_TARGET_AVX512_WIDE MT_TARGET_AVX512 for loops the compiler vectorises itself, with 512-bit
//                         vectors (GCC otherwise prefers 256-bit ones at this level; Clang ignores
//                         the preference in a target attribute)
// AVX-512 code may always be fused (AVX-512 F has its own FMA instructions).
// MT_X86_TARGETS is 1 where these attributes exist (GCC or Clang on x86-64); elsewhere only the
// portable code paths are built.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MT_X86_TARGETS 1
#define MT_TARGET_F16C __attribute__((target("avx,f16c")))
#define MT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MT_TARGET_AVX2_NO_FMA __attribute__((target("avx2,f16c")))
#define MT_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define MT_TARGET_AVX512BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#if defined(__clang__)
#define MT_TARGET_AVX512_WIDE MT_TARGET_AVX512
#else
#define MT_TARGET_AVX512_WIDE \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#endif
#else
#define MT_X86_TARGETS 0
#endif
