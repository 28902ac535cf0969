// MT_HOST_ASAN: defined to 1 when this translation unit is built with AddressSanitizer (GCC spells
// it __SANITIZE_ADDRESS__, Clang __has_feature(address_sanitizer)). The CUDA-on-host layer then
// annotates its fibers' stacks (block_runner.cpp) and poisons device memory outside live allocations
// (device_memory.cpp).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MT_HOST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MT_HOST_ASAN 1
#endif
#endif
