// Learning-rate schedulers: closed forms of (epoch, base lr).
#include "mixtrain/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mixtrain::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    if (!optimizer.initial_lr(g)) optimizer.set_initial_lr(g, optimizer.lr(g));
    base_lrs_.push_back(*optimizer.initial_lr(g));
  }
}

void LRScheduler::step() { set_last_epoch(last_epoch_ + 1); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  MT_CHECK(epoch >= 0, "LRScheduler: epoch must be >= 0, got ", epoch);
  MT_CHECK(optimizer_.num_param_groups() == base_lrs_.size(), "LRScheduler: the optimizer has ",
           optimizer_.num_param_groups(), " param groups but had ", base_lrs_.size(), " when the scheduler was made");
  last_epoch_ = epoch;
  last_lr_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    last_lr_.push_back(lr_at(epoch, base_lrs_[g]));
    optimizer_.set_lr(g, last_lr_.back());
  }
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MT_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
  initialize();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  MT_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  initialize();
}

double cosine_factor(double progress, double min_factor) {
  return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  // (base - eta_min) * ((1 + c) * 0.5) has the bits of PyTorch's (base - eta_min) * (1 + c) / 2
  // (scaling by a power of two commutes with rounding); the cosine's argument may differ by an ulp.
  return eta_min_ + (base_lr - eta_min_) * cosine_factor(static_cast<double>(epoch) / static_cast<double>(t_max_), 0.0);
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor, double end_factor)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor), end_factor_(end_factor) {
  MT_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  MT_CHECK(start_factor >= 0.0 && end_factor >= 0.0, "LinearWarmup: factors must be >= 0, got start ", start_factor,
           ", end ", end_factor);
  initialize();
}

double LinearWarmup::lr_at(int64_t epoch, double base_lr) const {
  if (warmup_steps_ == 0 || epoch >= warmup_steps_) return base_lr * end_factor_;
  const double t = static_cast<double>(epoch) / static_cast<double>(warmup_steps_);
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * t);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  MT_CHECK(!schedulers_.empty(), "SequentialLR: needs at least one scheduler");
  MT_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: expected ", schedulers_.size() - 1,
           " milestones for ", schedulers_.size(), " schedulers, got ", milestones_.size());
  for (const auto& s : schedulers_) MT_CHECK(s != nullptr, "SequentialLR: null scheduler");
  MT_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()) && (milestones_.empty() || milestones_.front() >= 0),
           "SequentialLR: milestones must be non-negative and increasing");
  initialize();
}

double SequentialLR::lr_at(int64_t epoch, double base_lr) const {
  size_t i = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  const int64_t start = i == 0 ? 0 : milestones_[i - 1];
  return schedulers_[i]->lr_at(epoch - start, base_lr);
}

}  // namespace mixtrain::optim
