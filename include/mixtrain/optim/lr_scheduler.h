// mixtrain/optim/lr_scheduler.h: learning-rate schedules (StepLR, CosineAnnealingLR, LinearWarmup)
// and SequentialLR to chain them (warmup, then cosine).
//
//   mt::optim::AdamW opt(params, {.lr = 1e-3});
//   auto warmup = std::make_shared<mt::optim::LinearWarmup>(opt, 100);
//   auto cosine = std::make_shared<mt::optim::CosineAnnealingLR>(opt, 900);
//   mt::optim::SequentialLR sched(opt, {warmup, cosine}, {100});
//   for (...) { ...; scaler.step(opt); scaler.update(); sched.step(); }
//
// Every schedule is a closed form of the epoch counter and each group's base lr (the group's
// `initial_lr`, recorded by the first scheduler attached to the optimizer, so several schedulers on
// one optimizer agree on it). Constructing a scheduler sets the epoch-0 lr, as in PyTorch; step()
// advances the counter by one and writes the new lr into every group.
//
// Stepping before the first optimizer step is fine (PyTorch's warning about the call order is not
// reproduced). A step that the GradScaler skipped (inf/NaN gradients) still counts: the schedule
// advances with iterations, not with applied updates; skipped steps are rare once the scale settles
// (see GradScaler::total_skipped_steps()).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch/iteration and sets every group's lr.
  void step();
  // The lr of every group as last set by this scheduler.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  // Resumes at `epoch` (from a checkpoint) and sets the lrs for it.
  void set_last_epoch(int64_t epoch);
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // The lr of a group whose base lr is `base_lr`, at `epoch` >= 0.
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Sets the epoch-0 lrs; every concrete scheduler calls it at the end of its constructor.
  void initialize() { set_last_epoch(0); }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// The one cosine schedule of the library (CosineAnnealingLR and the Trainer's cosine decay both use
// it): min_factor + (1 - min_factor) * 0.5 * (1 + cos(pi * progress)), from 1 at progress 0 down to
// min_factor at progress 1. The Trainer's values are unchanged by sharing it; CosineAnnealingLR's
// cosine argument is now pi * (epoch / T_max) rather than PyTorch's (pi * epoch) / T_max, which can
// move its lr by an ulp (well inside 1e-12 of PyTorch's closed form).
double cosine_factor(double progress, double min_factor);

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (PyTorch's closed form; past
// T_max it rises again, as PyTorch's does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear ramp of the factor from start_factor to end_factor over warmup_steps epochs, then constant:
// lr = base_lr * (start + (end - start) * min(epoch, warmup_steps) / warmup_steps). PyTorch's LinearLR
// with a warmup-friendly default start of 0.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 0.0, double end_factor = 1.0);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t warmup_steps_;
  double start_factor_, end_factor_;
};

// Runs schedulers[0] until milestones[0], then schedulers[1] restarted at its epoch 0, and so on
// (PyTorch's SequentialLR). The children only provide their closed forms: step this one, not them.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace mixtrain::optim
