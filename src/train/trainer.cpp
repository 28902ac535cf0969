// The Trainer's loop, evaluation and summary. Checkpoints are in trainer_checkpoint.cpp.
#include "mixtrain/train/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>
#include <string>
#include <utility>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd.h"
#include "mixtrain/cpu.h"
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
#include "mixtrain/parallel.h"
#include "mixtrain/random.h"

namespace mixtrain::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + mid)) / 2;
}

int64_t tensor_bytes(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts)
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// Keeps the lines of the metrics file whose "step" is <= `step` (what a run resumed from a
// checkpoint at `step` has already logged; later lines belong to the interrupted continuation and
// would be logged twice), rewriting it atomically, and returns it opened for appending.
io::AppendFile truncate_metrics(const std::string& path, int64_t step) {
  std::string kept;
  if (fs::exists(path)) {
    // Lines are short JSON objects; the file grows by about 100 bytes a step.
    std::istringstream in(io::read_file(path, uint64_t{1} << 32, "Trainer"));
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // Unparsable lines (a crash mid-write) and lines past the checkpoint are dropped.
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
        kept += line + '\n';
    }
  }
  io::write_file_atomic(path, kept, "Trainer");
  return io::AppendFile(path, "Trainer");
}

// Files a run writes into out_dir (checkpoint-<step>.safetensors aside).
constexpr const char* kRunFiles[] = {"metrics.jsonl", "summary.json", "model.safetensors", "checkpoint.safetensors"};

// The step of "checkpoint-<step>.safetensors", or -1 for another name.
int64_t periodic_checkpoint_step(const std::string& name) {
  constexpr std::string_view kPrefix = "checkpoint-", kSuffix = ".safetensors";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return -1;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

bool is_run_file(const std::string& name) {
  return periodic_checkpoint_step(name) >= 0 ||
         std::any_of(std::begin(kRunFiles), std::end(kRunFiles), [&](const char* f) { return name == f; });
}

}  // namespace

const char* to_string(NonFinitePolicy p) {
  switch (p) {
    case NonFinitePolicy::kStop: return "stop";
    case NonFinitePolicy::kSkip: return "skip";
    case NonFinitePolicy::kContinue: return "continue";
  }
  return "?";
}

NonFinitePolicy parse_nonfinite_policy(const std::string& text) {
  for (NonFinitePolicy p : {NonFinitePolicy::kStop, NonFinitePolicy::kSkip, NonFinitePolicy::kContinue})
    if (text == to_string(p)) return p;
  MT_FAIL("non-finite policy ", detail::quote_untrusted(text), " is not one of stop, skip, continue");
}

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

std::string TrainSummary::to_json(int indent) const {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json j = {{"model", model},
            {"data", data},
            {"augment", augment},
            {"precision", precision},
            {"scaler", scaler},
            {"master_weights", master_weights},
            {"compact_state", compact_state},
            {"weight_update", weight_update},
            {"epochs", epochs},
            {"steps", steps},
            {"steps_this_run", steps_this_run},
            {"batch_size", batch_size},
            {"world_size", world_size},
            {"global_batch_size", global_batch_size},
            {"test_accuracy", opt(test_accuracy)},
            {"test_loss", opt(test_loss)},
            {"final_loss", final_loss},
            {"step_ms_median", step_ms_median},
            {"samples_per_sec", samples_per_sec},
            {"gflops", opt(gflops)},
            {"peak_bytes", peak_bytes},
            {"skipped_steps", skipped_steps},
            {"final_scale", final_scale},
            {"threads", threads},
            {"cpu", cpu},
            {"isa", isa},
            {"products", products},
            {"train_seconds", train_seconds},
            {"num_parameters", num_parameters},
            {"model_state_bytes", model_state_bytes},
            {"model_state_bytes_per_param", model_state_bytes_per_param},
            {"seed", seed},
            {"lr", lr},
            {"lr_decay", lr_decay},
            {"lr_min_factor", lr_decay == "cosine" ? json(lr_min_factor) : json(nullptr)},
            {"resumed_from", resumed_from.empty() ? json(nullptr) : json(resumed_from)}};
  return j.dump(indent);
}

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
  if (options_.find_nonfinite_origin) origin_ = std::make_unique<nn::NonFiniteOrigin>(model);
  if (!options_.numerics_report_dir.empty())
    numerics_ = std::make_unique<nn::NumericsMonitor>(model, nn::NumericsOptions{.every = options_.numerics_every});
}

Trainer::Trainer(nn::Module& model, optim::Optimizer& optimizer, const data::Dataset& train_data,
                 const data::Dataset* eval_data, TrainerOptions options)
    : Trainer(model, train_data, eval_data, std::move(options)) {
  optimizer_ = &optimizer;
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
  owned_optimizer_ = make_optimizer(std::move(params));
  MT_CHECK(owned_optimizer_ != nullptr, "Trainer: the optimizer factory returned null");
  optimizer_ = owned_optimizer_.get();
  prepare_optimizer(*optimizer_, options_.precision);
  base_lr_ = optimizer_->lr(0);
}

Trainer::~Trainer() = default;

int64_t Trainer::total_steps() const {
  return options_.max_steps > 0 ? options_.max_steps : options_.epochs * loader_.size();
}

// ---- non-finite values -----------------------------------------------------------------------------

int64_t Trainer::first_nonfinite_parameter() const { return first_non_finite(optimizer_->parameters()); }

void Trainer::check_finite_before_writing(const std::string& what) const {
  const int64_t bad = first_nonfinite_parameter();
  if (bad >= 0)
    throw NonFiniteError(detail::concat("Trainer: not writing ", what, ": parameter '", optimizer_->param_name(bad),
                                        "' holds inf or NaN after step ", step_, " (the last good files are kept; ",
                                        "see on_nonfinite, --on-nonfinite)"));
}

std::string Trainer::divergence_message(const std::string& cause, double loss, const std::string& grad_name) const {
  std::string msg = detail::concat("Trainer: training diverged at step ", step_ + 1, " (epoch ", epoch_ + 1,
                                   ", batch ", batch_ + 1, "): ", cause.empty() ? "" : cause + "; ", "the loss is ",
                                   loss);
  const int64_t bad_param = first_nonfinite_parameter();
  if (bad_param >= 0)
    msg += detail::concat("; parameter '", optimizer_->param_name(bad_param),
                          "' already holds inf or NaN (the update of the step before overflowed it)");
  else if (!grad_name.empty())
    msg += detail::concat("; the first gradient with inf or NaN is that of '", grad_name, "'");
  if (origin_ && origin_->found()) msg += ". Origin: " + origin_->report()->to_string();
  return msg + ". The update was not applied and the last checkpoint and model files are unchanged. Lower the "
               "learning rate, train in bf16 or fp32, or skip such steps (on_nonfinite = skip, --on-nonfinite skip)";
}

bool Trainer::nonfinite_gate(double loss) {
  if (options_.on_nonfinite == NonFinitePolicy::kContinue) return true;
  // One read-only pass over the gradients (index i of the list is parameter i; a parameter
  // without a gradient is an undefined tensor, which the check skips).
  const std::vector<Tensor> params = optimizer_->parameters();
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) grads.push_back(p.grad());
  const int64_t bad_grad = first_non_finite(grads);
  if (std::isfinite(loss) && bad_grad < 0) return true;
  const std::string grad_name = bad_grad >= 0 ? optimizer_->param_name(static_cast<size_t>(bad_grad)) : "";
  if (options_.on_nonfinite == NonFinitePolicy::kSkip && first_nonfinite_parameter() < 0) return false;
  throw NonFiniteError(divergence_message("", loss, grad_name));
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

StepInfo Trainer::train_step(const data::Batch& batch) {
  StepInfo info;
  const Device device = model_device();
  if (origin_) origin_->begin_step(step_ + 1);
  if (numerics_) numerics_->begin_step(step_ + 1, scaler_.is_enabled() ? scaler_.get_scale() : 1.0);
  if (options_.lr_schedule) {
    optimizer_->set_lr(options_.lr_schedule(step_));
  } else if (options_.lr_decay == LrDecay::kCosine) {
    const double progress = static_cast<double>(step_) / static_cast<double>(total_steps());
    optimizer_->set_lr(base_lr_ * optim::cosine_factor(progress, options_.lr_min_factor));
  }
  optimizer_->zero_grad();
  Tensor loss;
  {
    // Forward and loss only: backward must run outside the region, in the dtypes the forward chose.
    const std::optional<DType> dtype = autocast_dtype(options_.precision.precision);
    amp::Autocast autocast(device.type, dtype, dtype.has_value());
    amp::Fp8Autocast fp8(fp8_region());
    loss = options_.loss_fn(model_->forward(batch.input.to(device)), batch.target.to(device));
  }
  MT_CHECK(loss.defined() && loss.numel() == 1, "Trainer: the loss must be one value, got ",
           loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  info.loss = loss.item<double>();
  info.scale = scaler_.get_scale();  // the scale this step multiplies by (update() may change it)
  bool stepped = true;
  if (scaler_.is_enabled()) {
    scaler_.scale(loss).backward();
    if (numerics_) numerics_->record_parameters(), numerics_->end_step();
    sync_after_backward(info);
    if (options_.after_backward) options_.after_backward();
    if (options_.clip_grad_norm) {
      scaler_.unscale_(*optimizer_);  // clip the real gradients, not the scaled ones
      optim::clip_grad_norm_(optimizer_->parameters(), *options_.clip_grad_norm);
    }
    stepped = scaler_.step(*optimizer_);
    // Skipped with the scale already at the floor: even unscaled the values overflow.
    if (!stepped && info.scale <= options_.scaler_floor && options_.on_nonfinite != NonFinitePolicy::kContinue)
      throw NonFiniteError(divergence_message(
          detail::concat("the GradScaler skipped it at loss scale ", info.scale, ", at or below the floor of ",
                         options_.scaler_floor, " (the values overflow even unscaled)"),
          info.loss, scaler_.last_nonfinite_param()));
    scaler_.update();
  } else {
    loss.backward();
    if (numerics_) numerics_->record_parameters(), numerics_->end_step();
    sync_after_backward(info);
    if (options_.after_backward) options_.after_backward();
    stepped = nonfinite_gate(info.loss);
    if (stepped) {
      if (options_.clip_grad_norm) optim::clip_grad_norm_(optimizer_->parameters(), *options_.clip_grad_norm);
      optimizer_->step();
    }
  }
  info.skipped = !stepped;
  info.lr = optimizer_->lr(0);
  if (origin_ && origin_->found()) info.nonfinite_origin = origin_->report()->to_string();
  return info;
}

// ---- fit -------------------------------------------------------------------------------------------

struct Trainer::RunState {
  Clock::time_point start = Clock::now();
  Clock::time_point epoch_start = Clock::now();
  std::vector<double> step_ms;
  int64_t steps = 0;
  Device device;            // the model's: memory is counted there
  int64_t peak = 0;         // highest memory::stats(device).peak_bytes seen during training
  int64_t other_bytes = 0;  // bytes held at the start that are not training state (datasets, ...)
  io::AppendFile metrics;   // open when out_dir is set
  int64_t total = 0;
  int64_t epochs = 0;

  void note_peak() { peak = std::max(peak, memory::stats(device).peak_bytes); }
};

void Trainer::log_step(RunState& run, const StepInfo& info) {
  const bool due = info.step % options_.log_every == 0 || info.step == run.total || !info.nonfinite_origin.empty();
  if (run.metrics.is_open() && due) {
    json j = {{"step", info.step},   {"epoch", info.epoch},     {"loss", info.loss},      {"lr", info.lr},
              {"scale", info.scale}, {"skipped", info.skipped}, {"step_ms", info.step_ms}};
    if (!info.nonfinite_origin.empty()) j["nonfinite_origin"] = info.nonfinite_origin;
    run.metrics.write_line(j.dump());  // one checked write per line: a crash keeps every line so far
  }
  if (options_.on_step) options_.on_step(info);
}

void Trainer::finish_epoch(RunState& run, bool evaluate_now) {
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
  if (evaluate_now && eval_data_ != nullptr) {
    // Evaluation allocates its own (larger, no-grad) batches: keep it out of the training peak.
    run.note_peak();
    last_eval_ = evaluate(*eval_data_);
    last_eval_step_ = step_;
    memory::reset_peak(run.device);
    info.eval = last_eval_;
  }
  if (options_.on_epoch) options_.on_epoch(info);
  run.epoch_start = Clock::now();
}

void Trainer::prepare_out_dir() {
  if (out_dir_ready_) return;
  const fs::path dir(options_.out_dir);
  fs::create_directories(dir);
  io::remove_stale_temp_files(dir.string());
  // This run's own directory when it resumes from a checkpoint that lies in it.
  bool own = false;
  if (!resumed_from_.empty()) {
    std::error_code ec;
    fs::path parent = fs::path(resumed_from_).parent_path();
    own = fs::equivalent(parent.empty() ? fs::path(".") : parent, dir, ec);
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!io::is_temp_file_name(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (own) {
    // Periodic checkpoints past the resumed step belong to the continuation this run replaces.
    for (const std::string& name : names)
      if (periodic_checkpoint_step(name) > step_) fs::remove(dir / name);
  } else if (!names.empty()) {
    if (!options_.overwrite) {
      std::string list;
      for (size_t i = 0; i < names.size() && i < 4; ++i) list += (i ? ", " : "") + detail::escape_untrusted(names[i]);
      if (names.size() > 4) list += detail::concat(" and ", names.size() - 4, " more");
      MT_FAIL("Trainer: the output directory '", detail::escape_untrusted(dir.string()), "' already holds files (",
              list, "): it belongs to another run. Choose an empty directory, resume that run from its checkpoint, ",
              "or replace its files (overwrite, --overwrite)");
    }
    for (const std::string& name : names)
      if (is_run_file(name)) fs::remove(dir / name);
  }
  out_dir_ready_ = true;
}

void Trainer::remove_old_checkpoints() const {
  std::vector<int64_t> steps;
  for (const fs::directory_entry& e : fs::directory_iterator(options_.out_dir)) {
    const int64_t k = periodic_checkpoint_step(e.path().filename().string());
    if (k >= 0) steps.push_back(k);
  }
  std::sort(steps.begin(), steps.end());
  const auto keep = static_cast<size_t>(options_.keep_checkpoints);
  for (size_t i = 0; i + keep < steps.size(); ++i)
    fs::remove(fs::path(options_.out_dir) / ("checkpoint-" + std::to_string(steps[i]) + ".safetensors"));
}

TrainSummary Trainer::fit() {
  if (!options_.resume_from.empty() && resumed_from_ != options_.resume_from) load_checkpoint(options_.resume_from);
  if (fresh_ && step_ == 0) default_generator().manual_seed(options_.seed);

  if (world_size() > 1 && !ddp_) ddp_ = std::make_unique<dist::DistributedDataParallel>(*model_, *options_.process_group);
  RunState run;
  run.device = model_device();
  run.total = total_steps();
  run.epochs = (run.total + loader_.size() - 1) / loader_.size();
  if (writes_files()) {
    prepare_out_dir();
    const std::string path = (fs::path(options_.out_dir) / "metrics.jsonl").string();
    // A fresh run starts the file afresh; a resumed one keeps the lines up to its checkpoint.
    if (step_ == 0) io::write_file_atomic(path, "", "Trainer");
    run.metrics = truncate_metrics(path, step_);
  }

  // Training memory = what is allocated from here on + the model, gradients and optimizer state
  // that already exist; everything else held now (datasets, the caller's tensors) is excluded.
  const int64_t training_state =
      tensor_bytes(model_->parameters()) + tensor_bytes(model_->buffers()) + optimizer_->state_bytes().total() + [&] {
        int64_t g = 0;
        for (const Tensor& p : model_->parameters())
          if (p.grad().defined()) g += static_cast<int64_t>(p.grad().nbytes());
        return g;
      }();
  run.other_bytes = memory::stats(run.device).current_bytes - training_state;
  memory::reset_peak(run.device);
  run.start = run.epoch_start = Clock::now();
  model_->train();

  while (step_ < run.total) {
    loader_.set_epoch(epoch_);
    loader_.set_start_batch(batch_);
    const int64_t step_before = step_;
    for (auto it = loader_.begin(); it != loader_.end(); ++it) {
      const Clock::time_point t0 = Clock::now();
      StepInfo info = train_step(*it);
      info.step_ms = ms_since(t0);
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
      info.batches_per_epoch = loader_.size();
      info.steps_this_run = run.steps;
      info.elapsed_s = std::chrono::duration<double>(Clock::now() - run.start).count();
      log_step(run, info);
      // Position first (epoch_/batch_ advance past a finished epoch), then the checkpoint, so that
      // a checkpoint written at an epoch's end resumes at the next epoch's first batch.
      if (batch_ == loader_.size()) finish_epoch(run, options_.eval_every_epoch);
      if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 && writes_files()) {
        // The optimizer's state_dict() is a deep copy: keep it out of the training peak, as evaluation.
        run.note_peak();
        save_checkpoint(
            (fs::path(options_.out_dir) / ("checkpoint-" + std::to_string(step_) + ".safetensors")).string());
        if (options_.keep_checkpoints > 0) remove_old_checkpoints();  // after the new one is on disk
        memory::reset_peak(run.device);
      }
      if (step_ >= run.total) break;
    }
    MT_INTERNAL_ASSERT(step_ > step_before, "the DataLoader yielded no batch at epoch ", epoch_, ", batch ", batch_);
  }
  run.note_peak();
  if (eval_data_ != nullptr && last_eval_step_ != step_) {
    last_eval_ = evaluate(*eval_data_);
    last_eval_step_ = step_;
  }
  model_->train();

  TrainSummary summary = make_summary(run);
  if (numerics_)
    numerics_->write_report(options_.numerics_report_dir,
                            detail::concat("Numerics of ", options_.model_name, ", ",
                                           to_string(options_.precision.precision), ", steps 1-", step_));
  if (writes_files()) {
    const fs::path dir(options_.out_dir);
    save_checkpoint((dir / "checkpoint.safetensors").string());  // refuses non-finite weights
    io::save_safetensors((dir / "model.safetensors").string(), model_->state_dict().items(),
                         {{"model", options_.model_name},
                          {"precision", std::string(to_string(options_.precision.precision))},
                          {"master_weights", summary.master_weights},
                          {"step", std::to_string(step_)}});
    io::write_file_atomic((dir / "summary.json").string(), summary.to_json() + "\n", "Trainer");
  }
  return summary;
}

TrainSummary Trainer::make_summary(const RunState& run) const {
  TrainSummary s;
  s.model = options_.model_name;
  s.data = options_.data_name;
  s.augment = options_.augment_name;
  s.lr_decay = options_.lr_schedule ? "custom" : options_.lr_decay == LrDecay::kCosine ? "cosine" : "constant";
  s.lr_min_factor = options_.lr_min_factor;
  s.precision = std::string(to_string(options_.precision.precision));
  s.scaler = scaler_.is_enabled();
  s.master_weights = std::string(short_dtype_name(options_.precision.param_dtype));
  s.compact_state = options_.precision.compact_state;
  s.weight_update = std::string(to_string(options_.precision.weight_update));
  s.epochs = static_cast<double>(step_) / static_cast<double>(loader_.size());
  s.steps = step_;
  s.steps_this_run = run.steps;
  s.batch_size = options_.batch_size;
  s.world_size = world_size();
  s.global_batch_size = options_.batch_size * world_size();
  if (last_eval_) {
    s.test_accuracy = last_eval_->accuracy;
    s.test_loss = last_eval_->loss;
  }
  s.final_loss = epoch_loss_count_ > 0 ? epoch_loss_sum_ / static_cast<double>(epoch_loss_count_) : last_epoch_loss_;
  // The first steps create the optimizer state, fill the allocator cache and oneDNN's primitive
  // cache: not representative when there are enough later steps to time.
  const auto warm = static_cast<int64_t>(run.step_ms.size()) > options_.timing_warmup_steps
                        ? options_.timing_warmup_steps
                        : int64_t{0};
  s.step_ms_median = median(std::vector<double>(run.step_ms.begin() + warm, run.step_ms.end()));
  s.samples_per_sec = s.step_ms_median > 0 ? 1000.0 * static_cast<double>(s.global_batch_size) / s.step_ms_median : 0;
  if (options_.flops_per_sample > 0)
    s.gflops = static_cast<double>(options_.flops_per_sample) * s.samples_per_sec / 1e9;
  s.peak_bytes = std::max<int64_t>(0, run.peak - run.other_bytes);
  s.skipped_steps = skipped_steps_;
  s.final_scale = scaler_.get_scale();
  s.threads = get_num_threads();
  s.cpu = cpu::cpu_name();
  s.isa = cpu::name(cpu::isa());
  s.products = products(options_.precision.precision, run.device);
  s.train_seconds = std::chrono::duration<double>(Clock::now() - run.start).count();
  s.num_parameters = model_->num_parameters();
  const optim::ModelStateBytes state = optimizer_->model_state_bytes();
  s.model_state_bytes = state.total();
  s.model_state_bytes_per_param = state.bytes_per_param();
  s.seed = options_.seed;
  s.lr = optimizer_->lr(0);
  s.resumed_from = resumed_from_;
  return s;
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
