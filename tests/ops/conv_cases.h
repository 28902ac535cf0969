// The conv2d geometries every conv2d kernel is checked on: the oneDNN paths against the fp64
// reference loops (tests/ops/test_conv.cpp) and the CUDA kernels against the CPU
// (tests/cuda/test_cuda_conv.cpp). Tests pick some by index: append new cases at the end.
#pragma once

#include <string>
#include <vector>

#include "mixtrain/nn/functional.h"
#include "mixtrain/shape.h"

namespace mixtrain::testing {

struct ConvCase {
  std::string name;
  Shape x, w;
  nn::functional::Conv2dOptions o;
};

inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
    {"3x3 pad 1", {2, 8, 9, 9}, {16, 8, 3, 3}, {.padding_h = 1, .padding_w = 1}},
    {"stride 2", {2, 6, 11, 10}, {8, 6, 3, 3}, {.stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1}},
    {"dilation 2", {1, 4, 12, 12}, {6, 4, 3, 3}, {.padding_h = 2, .padding_w = 2, .dilation_h = 2, .dilation_w = 2}},
    {"groups 2", {2, 8, 7, 7}, {12, 4, 3, 3}, {.padding_h = 1, .padding_w = 1, .groups = 2}},
    {"depthwise",
     {2, 8, 8, 8},
     {8, 1, 3, 3},
     {.stride_h = 2, .stride_w = 2, .padding_h = 1, .padding_w = 1, .groups = 8}},
    {"1x1", {3, 16, 5, 5}, {32, 16, 1, 1}, {}},
    {"3-channel input", {2, 3, 16, 16}, {16, 3, 5, 5}, {.padding_h = 2, .padding_w = 2}},
    {"asymmetric", {2, 4, 9, 7}, {6, 4, 3, 1}, {.stride_h = 2, .stride_w = 1, .padding_h = 0, .padding_w = 1}},
    // floor rounding leaves the last input row unused (oneDNN's right padding would be negative)
    {"stride 3 floor", {1, 4, 7, 8}, {4, 4, 3, 3}, {.stride_h = 3, .stride_w = 3}},
    {"all combined",
     {2, 6, 10, 9},
     {9, 2, 3, 2},
     {.stride_h = 2, .stride_w = 1, .padding_h = 1, .padding_w = 2, .dilation_h = 2, .dilation_w = 1, .groups = 3}},
    {"depthwise x2 (channel multiplier 2)", {2, 6, 9, 9}, {12, 1, 3, 3}, {.padding_h = 1, .padding_w = 1, .groups = 6}},
  };
  return cases;
}

}  // namespace mixtrain::testing
