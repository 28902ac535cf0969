// src/train/run_state.h (internal): what one fit() call keeps besides the Trainer's saved position: its
// clocks, step times, memory accounting and open metrics file. Shared by the loop (trainer.cpp), which
// fills it, and the reporting (metrics.cpp), which logs and summarises from it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtrain/io/event_file.h"
#include "mixtrain/io/file.h"
#include "mixtrain/memory.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::train {

struct Trainer::RunState {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point epoch_start = std::chrono::steady_clock::now();
  std::vector<double> step_ms;
  int64_t steps = 0;
  Device device;            // the model's: memory is counted there
  int64_t peak = 0;         // highest memory::stats(device).peak_bytes seen during training
  int64_t other_bytes = 0;  // bytes held at the start that are not training state (datasets, ...)
  io::AppendFile metrics;   // open when out_dir is set
  std::optional<io::EventFileWriter> events;  // TensorBoard's, when out_dir is set and options.tensorboard
  int64_t total = 0;
  int64_t epochs = 0;
  std::vector<TrainSummary::Eval> evals;  // this fit() call's evaluations

  // The training peak so far (the accounting of TrainSummary::peak_bytes).
  int64_t training_peak() {
    note_peak();
    return std::max<int64_t>(0, peak - other_bytes);
  }

  // The breakdown of the highest peak: the allocator's at each new one.
  void note_peak() {
    const int64_t now = memory::stats(device).peak_bytes;
    if (now > peak || peak_breakdown.total_bytes == 0) peak_breakdown = memory::peak_breakdown(device);
    peak = std::max(peak, now);
  }
  memory::Breakdown peak_breakdown;
};

namespace detail {

// The numbers of a step's metrics.jsonl line, by key, in the order written: loss, lr, scale,
// step_ms, grad_norm (with clipping), skipped_total, samples_per_s, tokens_per_s (several targets per
// example), peak_mib, eval_loss/eval_perplexity/eval_accuracy (a step that evaluated). The event file
// holds the same values under tensorboard_tag(key).
std::vector<std::pair<std::string, double>> step_scalars(const StepInfo& info);
// "train/loss", "train/loss_scale" (scale), "train/skipped_steps" (skipped_total), "eval/loss" (eval_loss), ...
std::string tensorboard_tag(const std::string& key);

// An evaluation's keys in a JSON object: <prefix>loss, <prefix>perplexity (a language model),
// <prefix>accuracy (when scored) — metrics.jsonl's eval_* and summary.json's evals.
void add_eval(nlohmann::json& j, const EvalResult& r, const std::string& prefix);

// The training state that exists before the first step: the model's parameters, buffers and
// gradients and the optimizer's state (what RunState::other_bytes leaves out of the peak).
int64_t training_state_bytes(const nn::Module& model, const optim::Optimizer& optimizer);

}  // namespace detail
}  // namespace mixtrain::train
