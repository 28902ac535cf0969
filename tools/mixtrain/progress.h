// Progress output of train/compare: a one-line progress bar redrawn in place when stdout is a
// terminal, else one line per epoch (logs and pipes stay readable).
#pragma once

#include <mixtrain/train/trainer.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace mixtrain::cli {

class Progress {
 public:
  // `label` prefixes every line ("[bf16] ").
  Progress(std::string label, bool terminal);
  static bool stdout_is_terminal();

  // Redraws the bar; a step that evaluated also prints a line with the validation metrics.
  void on_step(const train::StepInfo& info);
  void on_epoch(const train::EpochInfo& info);
  // Clears the bar (before the caller prints its summary).
  void finish();

  // Installs both callbacks into the options.
  void attach(train::TrainerOptions& options);

 private:
  void clear_bar();

  std::string label_;
  bool terminal_;
  bool bar_shown_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  train::StepInfo last_{};
  int64_t samples_ = 0;              // examples of this run's steps (every process, every micro-batch)
  int64_t epoch_first_samples_ = 0;  // samples_ at the start of the current epoch
};

}  // namespace mixtrain::cli
