// The Trainer's loop: construction, one training step, fit() with its epochs, and evaluation. What the
// loop calls on lives beside it, one job a file: the output directory in run_directory.cpp, the inf/NaN
// checks and policy in nonfinite_guard.cpp, metrics lines and the summary in metrics.cpp, checkpoints in
// trainer_checkpoint.cpp.
#include "mixtrain/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/io/file.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/reduce.h"
#include "mixtrain/optim/adam.h"
#include "mixtrain/optim/clip_grad.h"
#include "mixtrain/optim/lr_scheduler.h"
#include "mixtrain/random.h"
#include "train/nonfinite_guard.h"
#include "train/run_directory.h"
#include "train/run_state.h"

namespace mixtrain::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

OptimizerFactory adamw(double lr, double weight_decay) {
  return [lr, weight_decay](std::vector<optim::NamedParameter> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamOptions{.lr = lr, .weight_decay = weight_decay});
  };
}

Tensor default_loss(const Tensor& output, const Tensor& target) {
  if (output.dim() == 3 && target.dim() == 2)  // language model: every token is one prediction
    return nn::functional::cross_entropy(output.reshape({-1, output.size(2)}), target.reshape({-1}));
  return nn::functional::cross_entropy(output, target);
}

double EvalResult::perplexity() const { return std::exp(loss); }

// ---- construction -----------------------------------------------------------------------------

Trainer::Trainer(nn::Module& model, const data::Dataset& train_data, const data::Dataset* eval_data,
                 TrainerOptions options)
    : model_(&model),
      optimizer_(nullptr),
      train_data_(&train_data),
      eval_data_(eval_data),
      options_(std::move(options)),
      loader_(train_data, {.batch_size = options_.batch_size,
                           .shuffle = options_.shuffle,
                           .seed = options_.seed,
                           .drop_last = options_.drop_last,
                           .prefetch = options_.prefetch,
                           .num_replicas = options_.process_group ? options_.process_group->size() : 1,
                           .rank = options_.process_group ? options_.process_group->rank() : 0,
                           .transform = options_.train_transform}),
      scaler_([&] {
        amp::GradScalerOptions o = options_.precision.scaler_options;
        o.enabled = uses_scaler(options_.precision);
        return o;
      }()) {
  validate(options_.precision);
  MT_CHECK(options_.epochs >= 1, "Trainer: epochs must be >= 1, got ", options_.epochs);
  MT_CHECK(options_.max_steps >= 0, "Trainer: max_steps must be >= 0, got ", options_.max_steps);
  MT_CHECK(options_.checkpoint_every >= 0, "Trainer: checkpoint_every must be >= 0, got ", options_.checkpoint_every);
  MT_CHECK(options_.keep_checkpoints >= 0, "Trainer: keep_checkpoints must be >= 0, got ", options_.keep_checkpoints);
  MT_CHECK(options_.log_every >= 1, "Trainer: log_every must be >= 1, got ", options_.log_every);
  MT_CHECK(std::isfinite(options_.scaler_floor) && options_.scaler_floor >= 0,
           "Trainer: scaler_floor must be a finite value >= 0, got ", options_.scaler_floor);
  MT_CHECK(!options_.clip_grad_norm || (std::isfinite(*options_.clip_grad_norm) && *options_.clip_grad_norm > 0),
           "Trainer: clip_grad_norm must be a finite value > 0, got ", options_.clip_grad_norm.value_or(0));
  MT_CHECK(options_.lr_min_factor >= 0.0 && options_.lr_min_factor <= 1.0,
           "Trainer: lr_min_factor must be in [0, 1], got ", options_.lr_min_factor);
  MT_CHECK(options_.eval_batch_size >= 1, "Trainer: eval_batch_size must be >= 1, got ", options_.eval_batch_size);
  MT_CHECK(options_.loss_fn != nullptr, "Trainer: loss_fn is empty");
  MT_CHECK(loader_.size() > 0, "Trainer: the training set (", train_data_->size(), " examples) holds no full batch of ",
           options_.batch_size);
  MT_CHECK(options_.accumulation_steps >= 1, "Trainer: accumulation_steps must be >= 1, got ",
           options_.accumulation_steps);
  // A step never spans two epochs: more micro-batches than an epoch has would be a smaller batch
  // than the one asked for.
  MT_CHECK(options_.accumulation_steps <= loader_.size(), "Trainer: an epoch has ", loader_.size(), " batches of ",
           options_.batch_size, " per process, fewer than the ", options_.accumulation_steps,
           " micro-batches of one step (accumulation_steps)");
  MT_CHECK(options_.warmup_steps >= 0, "Trainer: warmup_steps must be >= 0, got ", options_.warmup_steps);
  MT_CHECK(options_.eval_every >= 0, "Trainer: eval_every must be >= 0, got ", options_.eval_every);
  MT_CHECK(options_.lr_schedule || options_.lr_decay != LrDecay::kCosine || options_.warmup_steps < total_steps(),
           "Trainer: warmup_steps (", options_.warmup_steps, ") must be fewer than the run's ", total_steps(),
           " steps for a cosine decay to follow it");
  if (options_.find_nonfinite_origin) origin_ = std::make_unique<nn::NonFiniteOrigin>(model);
  if (!options_.numerics_report_dir.empty())
    numerics_ = std::make_unique<nn::NumericsMonitor>(model, nn::NumericsOptions{.every = options_.numerics_every});
}

Trainer::Trainer(nn::Module& model, optim::Optimizer& optimizer, const data::Dataset& train_data,
                 const data::Dataset* eval_data, TrainerOptions options)
    : Trainer(model, train_data, eval_data, std::move(options)) {
  optimizer_ = &optimizer;
  adopt_optimizer();
  base_lr_ = optimizer.lr(0);
  // Mode (b) needs masters, which the optimizer creates only for parameters that were already
  // 16-bit when it was built: converting afterwards would leave it updating 16-bit values directly.
  if (options_.precision.param_dtype != kFloat32)
    for (const Tensor& p : optimizer.parameters())
      MT_CHECK(p.dtype() == options_.precision.param_dtype, "Trainer: master weights ",
               short_dtype_name(options_.precision.param_dtype), " need the model converted before the optimizer is ",
               "built (a parameter is ", p.dtype(), "): call mt::train::prepare_model(model, precision) first, ",
               "or pass an OptimizerFactory");
  prepare_optimizer(optimizer, options_.precision);
}

Trainer::Trainer(nn::Module& model, const OptimizerFactory& make_optimizer, const data::Dataset& train_data,
                 const data::Dataset* eval_data, TrainerOptions options)
    : Trainer(model, train_data, eval_data, std::move(options)) {
  prepare_model(model, options_.precision);
  std::vector<optim::NamedParameter> params;
  for (auto& [name, p] : model.named_parameters()) params.push_back({name, p});
  if (options_.zero_stage == 1) {
    dist::ProcessGroup* group = options_.process_group;
    if (group == nullptr) group = (own_group_ = dist::make_single_process_group()).get();
    owned_optimizer_ = std::make_unique<dist::ZeroRedundancyOptimizer>(std::move(params), *group, make_optimizer);
  } else {
    owned_optimizer_ = make_optimizer(std::move(params));
  }
  MT_CHECK(owned_optimizer_ != nullptr, "Trainer: the optimizer factory returned null");
  optimizer_ = owned_optimizer_.get();
  adopt_optimizer();
  prepare_optimizer(*optimizer_, options_.precision);
  base_lr_ = optimizer_->lr(0);
}

Trainer::~Trainer() = default;

void Trainer::adopt_optimizer() {
  MT_CHECK(options_.zero_stage == 0 || options_.zero_stage == 1, "Trainer: zero_stage must be 0 or 1 (ZeRO stage 1), got ",
           options_.zero_stage);
  zero_ = dynamic_cast<dist::ZeroRedundancyOptimizer*>(optimizer_);
  MT_CHECK(options_.zero_stage == 0 || zero_ != nullptr, "Trainer: zero_stage 1 shards the optimizer state, but ",
           "this optimizer (", optimizer_->name(), ") holds all of it: pass a dist::ZeroRedundancyOptimizer, or ",
           "an OptimizerFactory and let the Trainer build one");
  if (zero_ != nullptr) {
    MT_CHECK(options_.process_group == nullptr || &zero_->group() == options_.process_group, "Trainer: the ",
             "ZeroRedundancyOptimizer shards over another process group than options.process_group");
    MT_CHECK(options_.process_group != nullptr || zero_->group().size() == 1, "Trainer: the ZeroRedundancyOptimizer ",
             "shards over ", zero_->group().size(), " ranks: set options.process_group to its group");
  }
}

int64_t Trainer::batches_per_epoch() const {
  const int64_t m = loader_.size(), n = options_.accumulation_steps;
  return options_.drop_last ? m / n : (m + n - 1) / n;
}

int64_t Trainer::total_steps() const {
  return options_.max_steps > 0 ? options_.max_steps : options_.epochs * batches_per_epoch();
}

// ---- one step -----------------------------------------------------------------------------------

Device Trainer::model_device() const {
  for (const Tensor& p : model_->parameters()) return p.device();
  return Device{};
}

// Data parallelism: the gradient reductions of this backward have landed (DistributedDataParallel
// waits for them in its last gradient hook; this catches parameters that got none), and the
// reported loss is the mean over the ranks, so that every rank takes the same decisions.
void Trainer::sync_after_backward(StepInfo& info) {
  if (!ddp_) return;
  ddp_->finish_gradient_sync();
  const Tensor l = from_vector(std::vector<double>{info.loss}, {1}, {.device = Device{}});  // the group reduces host tensors
  options_.process_group->all_reduce(l, dist::ReduceOp::kAvg);
  info.loss = l.item<double>();
}

std::optional<double> Trainer::scheduled_lr(int64_t step) const {
  if (options_.lr_schedule) return options_.lr_schedule(step);
  const int64_t warmup = options_.warmup_steps;
  if (step < warmup) return base_lr_ * static_cast<double>(step) / static_cast<double>(warmup);
  if (options_.lr_decay == LrDecay::kCosine) {
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total_steps() - warmup);
    return base_lr_ * optim::cosine_factor(progress, options_.lr_min_factor);
  }
  if (warmup > 0) return base_lr_;
  return std::nullopt;  // the optimizer's lr is left as it is
}

int64_t Trainer::micro_batch_samples(int64_t first, int64_t count) const {
  // Every batch of an epoch is full but the last one of a shard that batch_size does not divide.
  const int64_t b = options_.batch_size, shard = loader_.shard_size();
  return std::min(shard, (first + count) * b) - first * b;
}

Tensor Trainer::forward_loss(const data::Batch& batch, Device device) {
  Tensor loss;
  {
    // Forward and loss only: backward must run outside the region, in the dtypes the forward chose.
    const std::optional<DType> dtype = autocast_dtype(options_.precision.precision);
    amp::Autocast autocast(device.type, dtype, dtype.has_value());
    amp::Fp8Autocast fp8(fp8_region());
    const Tensor input = batch.input.to(device), target = batch.target.to(device);  // the batch: "other"
    const memory::CategoryScope activations(memory::Category::kActivations);
    // The loss runs outside the model's modules: its ops (and the fused head's) are named "loss".
    static const std::string loss_scope = "loss";
    if (nn::LinearHeadLanguageModel* lm = fused_head_model()) {
      const nn::LinearHead head = lm->output_head();
      const Tensor hidden = lm->hidden_states(input);
      const autograd::ScopeGuard scope(autograd::module_scopes_enabled() ? &loss_scope : nullptr);
      loss = nn::functional::linear_cross_entropy(hidden, head.weight, head.bias, target,
                                                  {.block_rows = options_.fused_lm_head_block_rows});
    } else {
      const Tensor output = model_->forward(input);
      const autograd::ScopeGuard scope(autograd::module_scopes_enabled() ? &loss_scope : nullptr);
      loss = options_.loss_fn(output, target);
    }
  }
  MT_CHECK(loss.defined() && loss.numel() == 1, "Trainer: the loss must be one value, got ",
           loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  return loss;
}

nn::LinearHeadLanguageModel* Trainer::fused_head_model() const {
  if (!options_.fused_lm_head) return nullptr;
  using LossPtr = Tensor (*)(const Tensor&, const Tensor&);
  const LossPtr* loss = options_.loss_fn.target<LossPtr>();
  if (loss == nullptr || *loss != &default_loss) return nullptr;
  return dynamic_cast<nn::LinearHeadLanguageModel*>(model_);
}

StepInfo Trainer::train_step(data::DataLoader::Iterator& batch, int64_t micro_batches, double& data_wait_ms) {
  StepInfo info;
  const Device device = model_device();
  if (origin_) origin_->begin_step(step_ + 1);
  if (numerics_) numerics_->begin_step(step_ + 1, scaler_.is_enabled() ? scaler_.get_scale() : 1.0);
  if (const std::optional<double> lr = scheduled_lr(step_)) optimizer_->set_lr(*lr);
  optimizer_->zero_grad();
  info.scale = scaler_.get_scale();  // the scale every micro-batch multiplies by (update() may change it)
  // Each micro-batch's mean loss counts by its share of the step's examples: the step's loss and
  // gradients are those of one batch holding all of them.
  const int64_t samples = micro_batch_samples(batch_ * options_.accumulation_steps, micro_batches);
  info.loss = 0;
  for (int64_t k = 0; k < micro_batches; ++k) {
    if (k > 0) {
      const Clock::time_point t0 = Clock::now();
      ++batch;
      data_wait_ms += ms_since(t0);
      MT_INTERNAL_ASSERT(batch != data::DataLoader::Iterator(), "the DataLoader ended inside step ", step_ + 1);
    }
    Tensor loss = forward_loss(*batch, device);
    const int64_t n = batch->input.size(0);
    info.samples += n;
    info.targets += batch->target.numel();
    const double share = micro_batches == 1 ? 1.0 : static_cast<double>(n) / static_cast<double>(samples);
    info.loss += share * loss.item<double>();
    if (micro_batches > 1) loss = loss * share;
    Tensor objective = scaler_.is_enabled() ? scaler_.scale(loss) : loss;
    // Data parallelism reduces the gradients once, in the last micro-batch's backward.
    if (ddp_ && k + 1 < micro_batches) {
      const dist::DistributedDataParallel::NoSync no_sync = ddp_->no_sync();
      objective.backward();
    } else {
      objective.backward();
    }
  }
  MT_INTERNAL_ASSERT(info.samples == samples, "step ", step_ + 1, " has ", info.samples, " examples, expected ", samples);
  const int64_t world = world_size();
  info.samples *= world;  // every rank's batch has the same size (the loader pads shards)
  info.targets *= world;
  // What the step allocates is optimizer state: the moments its first call creates (and its few
  // short-lived buffers; no op scope, or the moments would be its temporaries while they are made).
  const memory::CategoryScope optimizer_state(memory::Category::kOptimizerState);
  bool stepped = true;
  if (scaler_.is_enabled()) {
    if (numerics_) numerics_->record_parameters(), numerics_->end_step();
    sync_after_backward(info);
    if (options_.after_backward) options_.after_backward();
    if (options_.clip_grad_norm) {
      scaler_.unscale_(*optimizer_);  // clip the real gradients, not the scaled ones
      info.grad_norm = optim::clip_grad_norm_(optimizer_->parameters(), *options_.clip_grad_norm);
    }
    stepped = scaler_.step(*optimizer_);
    // Skipped with the scale already at the floor: even unscaled the values overflow.
    if (!stepped && info.scale <= options_.scaler_floor && options_.on_nonfinite != NonFinitePolicy::kContinue) {
      const std::string cause = mixtrain::detail::concat("the GradScaler skipped it at loss scale ", info.scale,
                                                         ", at or below the floor of ", options_.scaler_floor,
                                                         " (the values overflow even unscaled)");
      throw NonFiniteError(detail::divergence_message(*optimizer_, origin_.get(), {step_, epoch_, batch_}, cause,
                                                      info.loss, scaler_.last_nonfinite_param()));
    }
    scaler_.update();
  } else {
    if (numerics_) numerics_->record_parameters(), numerics_->end_step();
    sync_after_backward(info);
    if (options_.after_backward) options_.after_backward();
    stepped =
        detail::nonfinite_gate(*optimizer_, options_.on_nonfinite, origin_.get(), {step_, epoch_, batch_}, info.loss);
    if (stepped) {
      if (options_.clip_grad_norm)
        info.grad_norm = optim::clip_grad_norm_(optimizer_->parameters(), *options_.clip_grad_norm);
      optimizer_->step();
    }
  }
  info.skipped = !stepped;
  info.lr = optimizer_->lr(0);
  if (origin_ && origin_->found()) info.nonfinite_origin = origin_->report()->to_string();
  return info;
}

// ---- fit -------------------------------------------------------------------------------------------

const EvalResult& Trainer::evaluate_now(RunState& run) {
  // Evaluation allocates its own (larger, no-grad) batches: keep it out of the training peak.
  run.note_peak();
  last_eval_ = evaluate(*eval_data_);
  last_eval_step_ = step_;
  run.evals.push_back({step_, *last_eval_});
  memory::reset_peak(run.device);
  return *last_eval_;
}

void Trainer::finish_epoch(RunState& run, bool evaluate_at_end) {
  EpochInfo info;
  info.epoch = epoch_ + 1;
  info.epochs = run.epochs;
  info.step = step_;
  info.train_loss = epoch_loss_count_ > 0 ? epoch_loss_sum_ / static_cast<double>(epoch_loss_count_) : 0.0;
  last_epoch_loss_ = info.train_loss;
  epoch_loss_sum_ = 0;
  epoch_loss_count_ = 0;
  ++epoch_;
  batch_ = 0;
  info.seconds = std::chrono::duration<double>(Clock::now() - run.epoch_start).count();
  if (evaluate_at_end && eval_data_ != nullptr) info.eval = last_eval_step_ == step_ ? *last_eval_ : evaluate_now(run);
  if (options_.on_epoch) options_.on_epoch(info);
  run.epoch_start = Clock::now();
}

TrainSummary Trainer::fit() {
  // The output directory is this run's for the Trainer's life: a second run into it is refused
  // before either reads or writes anything there.
  if (writes_files() && !out_dir_lock_) out_dir_lock_ = io::DirectoryLock::acquire(options_.out_dir, "Trainer");
  if (!options_.resume_from.empty() && resumed_from_ != options_.resume_from) load_checkpoint(options_.resume_from);
  if (fresh_ && step_ == 0) default_generator().manual_seed(options_.seed);

  if (world_size() > 1 && !ddp_) ddp_ = std::make_unique<dist::DistributedDataParallel>(*model_, *options_.process_group);
  RunState run;
  run.device = model_device();
  run.total = total_steps();
  run.epochs = (run.total + batches_per_epoch() - 1) / batches_per_epoch();
  if (writes_files()) {
    if (!out_dir_ready_) {
      detail::prepare_out_dir(options_.out_dir, options_.overwrite, resumed_from_, step_);
      if (options_.write_run_files) options_.write_run_files(options_.out_dir);
      out_dir_ready_ = true;
    }
    const std::string path = (fs::path(options_.out_dir) / "metrics.jsonl").string();
    // A fresh run starts the file afresh; a resumed one keeps the lines up to its checkpoint.
    if (step_ == 0) io::write_file_atomic(path, "", "Trainer");
    run.metrics = detail::truncate_metrics(path, step_);
    if (options_.tensorboard) {
      run.events.emplace(options_.out_dir);
      // A resumed run repeats the steps after its checkpoint: TensorBoard drops what the interrupted
      // attempt logged for them, as truncate_metrics did above.
      if (step_ > 0) run.events->start_session(step_ + 1);
    }
  }

  // Training memory = what is allocated from here on + the model, gradients and optimizer state
  // that already exist; everything else held now (datasets, the caller's tensors) is excluded.
  const int64_t training_state = detail::training_state_bytes(*model_, *optimizer_);
  run.other_bytes = memory::stats(run.device).current_bytes - training_state;
  // The breakdown names the module at the peak and sorts the model state from the rest.
  const autograd::ModuleScopes module_scopes;
  model_->set_scope_names();
  optimizer_->label_memory();
  memory::reset_peak(run.device);
  run.start = run.epoch_start = Clock::now();
  model_->train();

  const int64_t micro_per_epoch = loader_.size(), per_epoch = batches_per_epoch();
  while (step_ < run.total) {
    loader_.set_epoch(epoch_);
    loader_.set_start_batch(batch_ * options_.accumulation_steps);
    const int64_t step_before = step_;
    for (auto it = loader_.begin(); it != loader_.end(); ++it) {
      const Clock::time_point t0 = Clock::now();
      const int64_t micro_batches =
          std::min(options_.accumulation_steps, micro_per_epoch - batch_ * options_.accumulation_steps);
      double data_wait_ms = 0;
      StepInfo info = train_step(it, micro_batches, data_wait_ms);
      info.step_ms = ms_since(t0) - data_wait_ms;
      optimizer_->label_memory();  // the first step made the optimizer state
      ++step_;
      ++batch_;
      ++run.steps;
      run.step_ms.push_back(info.step_ms);
      skipped_steps_ += info.skipped;
      epoch_loss_sum_ += info.loss;
      ++epoch_loss_count_;
      info.step = step_;
      info.total_steps = run.total;
      info.epoch = epoch_ + 1;
      info.epochs = run.epochs;
      info.batch = batch_;
      info.batches_per_epoch = per_epoch;
      info.steps_this_run = run.steps;
      info.skipped_total = skipped_steps_;
      info.peak_bytes = run.training_peak();
      if (eval_data_ != nullptr && options_.eval_every > 0 && (step_ % options_.eval_every == 0 || step_ == run.total))
        info.eval = evaluate_now(run);
      info.elapsed_s = std::chrono::duration<double>(Clock::now() - run.start).count();
      log_step(run, info);
      // Position first (epoch_/batch_ advance past a finished epoch), then the checkpoint, so that
      // a checkpoint written at an epoch's end resumes at the next epoch's first batch.
      const bool epoch_done = batch_ == per_epoch;
      if (epoch_done) finish_epoch(run, options_.eval_every_epoch);
      if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 && saves_checkpoints()) {
        // The optimizer's state_dict() is a deep copy: keep it out of the training peak, as evaluation.
        run.note_peak();
        save_checkpoint(detail::periodic_checkpoint_path(options_.out_dir, step_));
        if (options_.keep_checkpoints > 0 && writes_files())  // after the new one is on disk
          detail::remove_old_checkpoints(options_.out_dir, options_.keep_checkpoints);
        memory::reset_peak(run.device);
      }
      // With drop_last, micro-batches too few for a whole step end the epoch unread.
      if (step_ >= run.total || epoch_done) break;
    }
    MT_INTERNAL_ASSERT(step_ > step_before, "the DataLoader yielded no batch at epoch ", epoch_, ", batch ", batch_);
  }
  run.note_peak();
  if (eval_data_ != nullptr && last_eval_step_ != step_) evaluate_now(run);
  model_->train();

  TrainSummary summary = make_summary(run);
  if (numerics_)
    numerics_->write_report(options_.numerics_report_dir,
                            mixtrain::detail::concat("Numerics of ", options_.model_name, ", ",
                                                     to_string(options_.precision.precision), ", steps 1-", step_));
  if (saves_checkpoints())  // refuses non-finite weights
    save_checkpoint((fs::path(options_.out_dir) / "checkpoint.safetensors").string());
  if (writes_files()) {
    const fs::path dir(options_.out_dir);
    const std::map<std::string, std::string> metadata = {
        {"model", options_.model_name},
        {"precision", std::string(to_string(options_.precision.precision))},
        {"master_weights", summary.master_weights},
        {"step", std::to_string(step_)}};
    if (options_.save_model)
      options_.save_model(*model_, options_.out_dir, metadata);
    else
      io::save_safetensors((dir / "model.safetensors").string(), model_->state_dict().items(), metadata);
    io::write_file_atomic((dir / "summary.json").string(), summary.to_json() + "\n", "Trainer");
  }
  return summary;
}

// ---- evaluation -----------------------------------------------------------------------------------

EvalResult Trainer::evaluate(const data::Dataset& data) {
  struct RestoreMode {
    nn::Module* m;
    bool training;
    ~RestoreMode() { m->train(training); }
  } restore{model_, model_->is_training()};
  model_->eval();
  NoGradGuard no_grad;
  data::DataLoader loader(data, {.batch_size = options_.eval_batch_size, .shuffle = false, .prefetch = 1});
  const std::optional<DType> dtype = autocast_dtype(options_.precision.precision);

  const Device device = model_device();
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0, batches = 0;
  bool classify = true;
  for (data::Batch& batch : loader) {
    if (options_.eval_max_batches > 0 && batches++ >= options_.eval_max_batches) break;
    Tensor out, loss;
    {
      amp::Autocast autocast(device.type, dtype, dtype.has_value());
      amp::Fp8Autocast fp8(fp8_region());
      out = model_->forward(batch.input.to(device));
      loss = options_.loss_fn(out, batch.target.to(device));
    }
    const int64_t n = batch.target.numel();
    loss_sum += loss.item<double>() * static_cast<double>(n);  // loss_fn is a mean over the targets
    r.samples += batch.input.size(0);
    r.targets += n;
    // Accuracy needs logits [..., C] over integer targets [...].
    classify = classify && out.dim() == batch.target.dim() + 1 && !is_floating(batch.target.dtype());
    if (classify) {
      const std::vector<int64_t> pred = argmax(out.to(kFloat32).reshape({-1, out.size(-1)}), 1).to_vector<int64_t>();
      const std::vector<int64_t> target = batch.target.reshape({-1}).to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == target[i];
    }
  }
  r.loss = r.targets > 0 ? loss_sum / static_cast<double>(r.targets) : std::nan("");
  if (classify && r.targets > 0) r.accuracy = static_cast<double>(correct) / static_cast<double>(r.targets);
  return r;
}

}  // namespace mixtrain::train
