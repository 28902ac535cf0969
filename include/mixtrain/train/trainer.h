// mixtrain/train/trainer.h: a training loop with one precision switch, checkpoints, exact resume,
// metrics and evaluation: what Hugging Face Accelerate's prepare() + loop gives Python users.
//
//   namespace nn = mt::nn;
//   nn::Sequential model(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   mt::data::FashionMNIST train_set(dir, mt::data::Split::kTrain), test_set(dir, mt::data::Split::kTest);
//   mt::train::TrainerOptions o;
//   o.precision = {.precision = mt::train::Precision::kFp16};   // autocast fp16 + GradScaler
//   o.epochs = 2;
//   o.out_dir = "runs/cnn-fp16";
//   mt::train::Trainer trainer(model, mt::train::adamw(1e-3, 0.01), train_set, &test_set, o);
//   mt::train::TrainSummary s = trainer.fit();
//
// Each step: zero_grad; forward + loss inside mt::amp::Autocast (fp32: no region); backward outside
// it, through the GradScaler when it is on (scale -> backward -> [unscale_ + clip] -> step -> update).
//
// Reproducibility. The data order is the DataLoader's (seed, epoch) permutation; a fresh fit()
// seeds the default generator with options.seed (dropout without its own generator, user code);
// Dropout modules keep their own generators, which checkpoints save by module name. A checkpoint
// holds the model state_dict, the optimizer state (moments, fp32 masters, step counts, group
// hyperparameters), the GradScaler state, every generator, and the position (step, epoch, batch in
// the epoch), so fit() from a checkpoint written at step N and run to step N+M gives the parameters
// of a straight N+M-step run bit for bit (same thread count: reductions are not reordered between
// runs, but their order depends on the thread count).
//
// Non-finite training. Under the GradScaler (fp16) a step with inf/NaN gradients is skipped and the
// scale backs off: that is normal. Anything else non-finite means the run has diverged: a NaN or inf
// loss or gradient without a scaler (fp32, bf16), or a skipped step whose scale was already at
// scaler_floor (even unscaled, the values overflow). options.on_nonfinite decides:
//   kStop (default)  fit() throws NonFiniteError, naming the step, the loss, the first non-finite
//                    parameter (the previous update overflowed it) or else the first non-finite
//                    gradient; the update is not applied and nothing more is written.
//   kSkip            without a scaler, the step is skipped like the GradScaler does (counted in
//                    skipped_steps); a non-finite parameter or a scale at the floor still stops.
//   kContinue        PyTorch's behaviour without a scaler: the update is applied whatever it holds.
// Whatever the policy, non-finite weights are never written: a checkpoint or model file that would
// hold them is refused (NonFiniteError), so the last good files stay.
//
// Output directory. A run writes only into an out_dir that is empty, or that holds the run it
// resumes (its checkpoint lies in out_dir), or when options.overwrite is set (then the run files
// listed below are removed first; other files are left alone). Temporary files that a killed
// process left behind (io::remove_stale_temp_files) are removed when fit() starts, and on resume the
// periodic checkpoints past the resumed step (written by the abandoned continuation) as well.
// fit() locks out_dir (io::DirectoryLock, rank 0) for the Trainer's life before it reads or writes
// anything there: a second run into the same directory is refused, naming it and the holder.
//
// Resume is exact or refused. A checkpoint records every setting that shapes the trajectory: the
// model, precision and parameter modes, the optimizer and its hyper-parameters, the base lr and its
// schedule (warmup and, for a cosine schedule, the total steps), seed, batch size (and with
// accumulation the global batch: per-process batch x processes x accumulation_steps), shuffling, augmentation,
// gradient clipping, and a fingerprint of the training data. load_checkpoint() refuses a checkpoint
// whose settings differ from this run's, listing every difference, unless each differing setting is
// named in options.resume_overrides (not allowed for those that fix the state's layout or the data
// position: model, precision, scaler, master_weights, compact_state, weight_update, optimizer, batch_size, shuffle,
// drop_last, train_size, and with gradient accumulation the global batch); the overridden settings then take
// this run's values. Every value loaded
// (position, counters, optimizer, scaler and generator state) is range-checked, and the state is
// complete: every parameter, every moment, master and compensation the optimizer keeps for a
// parameter that has taken a step (Optimizer::stepped_state_keys), every FP8 scale and amax history,
// in plain and ZeRO-1 checkpoints alike; a missing tensor is refused by name. Names and shapes are
// checked from the file's header before any tensor is allocated.
//
// Files in out_dir (nothing is written when it is empty):
//   metrics.jsonl            one JSON object per logged step: step, epoch, loss, lr, scale, skipped,
//                            step_ms, skipped_total, samples_per_s (global), tokens_per_s (language
//                            models), peak_mib (training peak so far), grad_norm (with clipping),
//                            eval_loss/eval_perplexity/eval_accuracy (at an eval_every step)
//                            (on resume, lines after the checkpoint's step are dropped first)
//   summary.json             TrainSummary::to_json()
//   model.safetensors        the final weights (state_dict, in the parameters' dtype; with compact_state
//                            the bf16 parameters, i.e. the fp32 masters truncated to bf16)
//   checkpoint.safetensors   the final training state (resume from it to train further)
//   checkpoint-<step>.safetensors  every checkpoint_every steps
//   events.out.tfevents.*    TensorBoard's event file (options.tensorboard), one per fit() call: a
//                            resumed run's file first tells TensorBoard to drop the steps after the
//                            checkpoint that the interrupted attempt logged
// Every file except metrics.jsonl is written atomically (io/file.h); metrics.jsonl is appended a
// checked line at a time (a full disk is an error, not a shorter file).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/data/dataloader.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/error.h"
#include "mixtrain/dist/ddp.h"
#include "mixtrain/dist/zero.h"
#include "mixtrain/io/file.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/lm_head.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/nn/nonfinite_origin.h"
#include "mixtrain/nn/numerics_monitor.h"
#include "mixtrain/optim/optimizer.h"
#include "mixtrain/memory.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train/precision.h"

namespace mixtrain::train {

// (model output, batch target) -> scalar fp32 loss. Called inside the autocast region.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// Builds the optimizer over the model's (already converted) named parameters.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::NamedParameter>)>;

// AdamW with the given lr and weight decay (the CLI's defaults: 1e-3, 0.01).
OptimizerFactory adamw(double lr = 1e-3, double weight_decay = 0.01);

// The default loss: cross-entropy of logits [B, C] against int targets [B], or of [B, T, V] against
// [B, T] (flattened to [B*T, V] and [B*T]: the mean over every token).
Tensor default_loss(const Tensor& output, const Tensor& target);

struct EvalResult {
  double loss = 0;                 // mean loss_fn over the targets (per token for a language model)
  std::optional<double> accuracy;  // argmax == target over the targets, when the output is [..., C] logits
  int64_t samples = 0;             // examples evaluated
  int64_t targets = 0;             // targets scored (samples x tokens for a language model)
  double perplexity() const;       // exp(loss)
  // Several targets per example: a language model, whose loss is per token (perplexity applies).
  bool per_token() const { return targets > samples; }
};

// Reported after every step (StepInfo) and every finished epoch (EpochInfo).
struct StepInfo {
  int64_t step = 0;         // 1-based global step just completed
  int64_t total_steps = 0;  // the step fit() stops at
  int64_t epoch = 0;        // 1-based epoch the step belongs to
  int64_t epochs = 0;       // epochs the run covers (the last may be partial)
  int64_t batch = 0;        // 1-based step within the epoch
  int64_t batches_per_epoch = 0;  // steps per epoch (Trainer::batches_per_epoch())
  double loss = 0;  // the step's loss (before scaling)
  double lr = 0;
  double scale = 1;            // loss scale the step used (1 without a scaler)
  bool skipped = false;        // the GradScaler skipped the update (inf/NaN gradient)
  // With TrainerOptions::clip_grad_norm: the total 2-norm of the gradients before clipping (unscaled,
  // and under DDP/ZeRO of the averaged gradients: the same on every rank). inf or NaN on a step the
  // GradScaler then skips; absent when the non-finite policy skipped the step before clipping.
  std::optional<double> grad_norm;
  // With TrainerOptions::find_nonfinite_origin: where this step's first inf/NaN came from
  // (NonFiniteOriginReport::to_string()), "" when none appeared.
  std::string nonfinite_origin;
  int64_t samples = 0;  // examples in the step: every micro-batch of every process (the global batch)
  int64_t targets = 0;  // targets scored in the step (samples x tokens for a language model)
  // With TrainerOptions::eval_every: the evaluation run after this step (before on_step is called).
  std::optional<EvalResult> eval;
  int64_t skipped_total = 0;  // steps skipped so far in the run, this one included
  int64_t peak_bytes = 0;     // peak training tensor bytes so far (TrainSummary::peak_bytes' measure)
  double step_ms = 0;          // compute time of the step (data loading excluded)
  int64_t steps_this_run = 0;  // steps run by this fit() call (fewer than `step` after a resume)
  double elapsed_s = 0;        // wall time since this fit() call started
};


struct EpochInfo {
  int64_t epoch = 0;  // 1-based, the epoch just finished
  int64_t epochs = 0;
  int64_t step = 0;
  double train_loss = 0;  // mean step loss over the epoch
  std::optional<EvalResult> eval;
  double seconds = 0;  // wall time of the epoch in this fit() call
};

enum class LrDecay { kConstant, kCosine };

enum class NonFinitePolicy { kStop, kSkip, kContinue };
// "stop", "skip", "continue"; parse_nonfinite_policy throws mt::Error for anything else.
std::string_view to_string(NonFinitePolicy p);
NonFinitePolicy parse_nonfinite_policy(const std::string& text);

// Thrown by fit() when training diverges (see "Non-finite training" above).
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

struct TrainerOptions {
  PrecisionConfig precision;
  int64_t epochs = 1;
  int64_t max_steps = 0;  // > 0: the run ends after this many steps in total, whatever `epochs` says
  int64_t batch_size = 128;
  // Gradient accumulation: each optimizer step runs forward and backward on this many consecutive
  // batches of batch_size (micro-batches) and then unscales, clips, steps and updates the scaler once
  // (PyTorch's AMP recipe: every micro-batch's loss is multiplied by the same loss scale). Each
  // micro-batch's loss is weighted by its share of the step's examples, so N micro-batches of B give
  // the step of one batch of N*B (loss_fn must be a mean over examples, or over a fixed number of
  // targets per example, as default_loss is). Under data parallelism the gradients are reduced once,
  // on the last micro-batch (DistributedDataParallel::no_sync before it). Steps, epochs' lengths,
  // checkpoint_every, log_every, eval_every, warmup_steps and max_steps count optimizer steps; an
  // epoch of M micro-batches has ceil(M / N) steps (the last one shorter), floor(M / N) with drop_last;
  // N > M is refused (a step never spans two epochs).
  int64_t accumulation_steps = 1;
  bool shuffle = true;
  bool drop_last = false;
  int prefetch = 2;   // batches the DataLoader builds ahead
  uint64_t seed = 0;  // data order and the default generator
  // Augmentation of training batches (e.g. data::random_horizontal_flip(seed)); never applied to
  // evaluation data. Deterministic per (seed, epoch, sample), so resume stays exact.
  data::BatchTransform train_transform;

  std::string out_dir;           // "" writes no files
  int64_t checkpoint_every = 0;  // > 0: checkpoint-<step>.safetensors every this many steps
  int64_t keep_checkpoints = 0;  // > 0: keep only the newest this many checkpoint-<step> files
  std::string resume_from;       // a checkpoint to continue from (fit() loads it)
  int64_t log_every = 1;         // metrics.jsonl gets every log_every-th step (and the last one)
  // With out_dir: every logged step's numbers also go to a TensorBoard event file in out_dir (tags
  // train/loss, train/lr, train/loss_scale, train/grad_norm, train/skipped_steps, train/step_ms,
  // train/samples_per_s, train/tokens_per_s, train/peak_mib, eval/loss, eval/perplexity,
  // eval/accuracy: metrics.jsonl's keys); `tensorboard --logdir out_dir` charts them.
  bool tensorboard = true;

  int64_t eval_batch_size = 500;
  int64_t eval_max_batches = 0;  // > 0: evaluate on the first batches only
  bool eval_every_epoch = true;  // else only at the end
  // > 0: evaluate after every eval_every-th step and after the last one (StepInfo::eval,
  // metrics.jsonl's eval_* keys, TrainSummary::evals). An epoch's end is not evaluated again when its
  // last step just was.
  int64_t eval_every = 0;

  int64_t timing_warmup_steps = 5;  // excluded from step_ms_median (when more steps than that ran)
  // Clip the (unscaled) gradients to this total 2-norm. With a scaler the gradients are unscaled in
  // place first, which the GradScaler refuses for fp16 parameters (mode b): use bf16 or fp32 there.
  std::optional<double> clip_grad_norm;
  // lr for the 0-based global step, set before each step (a closed form, so resume needs no state).
  std::function<double(int64_t step)> lr_schedule;
  // Without lr_schedule: the optimizer's initial lr (group 0's, applied to every group) rises
  // linearly from 0 over warmup_steps W, then kCosine decays it to lr_min_factor * lr_0 by the run's
  // end and kConstant keeps it. For the 0-based step t of T = total_steps():
  //   t < W:  lr_t = lr_0 * t / W
  //   else:   lr_t = lr_0 * (f + (1 - f) * (1 + cos(pi * (t - W) / (T - W))) / 2)  (kCosine; f = lr_min_factor)
  //           lr_t = lr_0                                                      (kConstant)
  // which is transformers' get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate = f) (f = 0:
  // get_cosine_schedule_with_warmup) and get_constant_schedule_with_warmup; without warmup, f = 0 is
  // PyTorch's CosineAnnealingLR with eta_min 0. kCosine needs W < T.
  LrDecay lr_decay = LrDecay::kConstant;
  double lr_min_factor = 0.0;  // in [0, 1]
  int64_t warmup_steps = 0;
  LossFn loss_fn = default_loss;
  // With the default loss on a language model whose logits are a linear map of its hidden states
  // (nn::LinearHeadLanguageModel: nn::GPT, nn::GPT2), training steps compute the head and the loss
  // together, a block of rows at a time (nn::functional::linear_cross_entropy): the [B, T, V] logits
  // never exist, and neither do their fp32 copy and gradients under autocast. Same loss; gradients
  // within rounding of the unfused path (more exact under autocast: the logits are not rounded to
  // 16 bits). false: the model's forward() and loss_fn, as for every other model. Evaluation always
  // runs forward() (it also reports accuracy from the logits).
  bool fused_lm_head = true;
  // Rows per block of the fused head (LinearCrossEntropyOptions::block_rows; 0: its default).
  int64_t fused_lm_head_block_rows = 0;

  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;
  // Check every op's outputs, forward and backward, for the first inf/NaN (nn::NonFiniteOrigin): the
  // divergence error, StepInfo and metrics.jsonl then name the op, module, dtypes, shapes and step
  // that produced it. Costs about one extra read of every activation and gradient.
  bool find_nonfinite_origin = false;
  // Non-empty: an nn::NumericsMonitor samples every numerics_every-th step (activations, gradients,
  // parameters against fp16, bf16 and FP8 ranges) and fit() writes its report.md and numerics.dat
  // into this directory at the end (also when out_dir is empty).
  std::string numerics_report_dir;
  int64_t numerics_every = 100;
  double scaler_floor = 1.0;  // a skipped step at or below this loss scale counts as diverged
  bool overwrite = false;     // replace another run's files in out_dir
  // Settings a resume may change (their names as load_checkpoint's refusal lists them).
  std::vector<std::string> resume_overrides;

  std::string model_name = "custom";  // recorded in summary.json and model.safetensors
  // How fit() writes the final weights into out_dir, given the model and the metadata below
  // (model, precision, master_weights, step). Unset: out_dir/model.safetensors with the model's
  // state_dict names. A model with a layout of its own sets it (the CLI's gpt2 writes Hugging Face's
  // config.json and model.safetensors through io::save_hf_gpt2).
  std::function<void(const nn::Module& model, const std::string& out_dir,
                     const std::map<std::string, std::string>& metadata)>
      save_model;
  // Called once the run directory is ready (this run's, another run's files removed), before the
  // first step, by the process that writes files: for files that belong with the run from its start
  // (the CLI's gpt2 writes its tokenizer there, so that every checkpoint of the run reads as text).
  std::function<void(const std::string& out_dir)> write_run_files;
  std::string data_name;              // the data the run used (the CLI's --data spec), recorded in summary.json
  std::string augment_name = "none";  // names train_transform in summary.json ("flip", ...)
  int64_t flops_per_sample = 0;       // training FLOPs per sample; > 0 adds gflops to the summary

  // Runs after each step's backward pass, before the gradients are unscaled, clipped, checked or
  // applied: where data parallelism waits for its gradient reductions.
  std::function<void()> after_backward;
  // Data parallelism (docs/distributed.md): with a group of more than one process, fit() wraps the
  // model in dist::DistributedDataParallel (rank 0's weights everywhere, gradients averaged over
  // the ranks during backward), each rank's loader visits its shard of every epoch's order,
  // batch_size is the per-rank batch (the global one is world size times it), the reported loss is
  // the mean over ranks, and only rank 0 writes out_dir's files. Every rank must run the same
  // Trainer with the same options. nullptr or a one-process group: plain training.
  dist::ProcessGroup* process_group = nullptr;
  // 1: ZeRO stage 1 (dist::ZeroRedundancyOptimizer, docs/distributed.md): the optimizer state
  // (masters, moments) is sharded over the process group's ranks (a group of one when there is
  // none), the trajectory stays DDP's, and checkpoints save each rank's shard beside the
  // checkpoint file ("checkpoint-<step>.zero-<rank>-of-<world>.safetensors"); a resume re-shards
  // them for any world size. With the OptimizerFactory constructor the Trainer builds the
  // ZeroRedundancyOptimizer; with your own optimizer, pass one. 0: every rank holds the whole state.
  int zero_stage = 0;
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochInfo&)> on_epoch;
};

// The result of fit(), written to summary.json.
struct TrainSummary {
  std::string model;
  std::string data;       // TrainerOptions::data_name
  std::string augment;    // TrainerOptions::augment_name
  std::string precision;  // "fp32", "bf16", "fp16"
  bool scaler = false;
  std::string master_weights;  // parameter dtype: "fp32", "bf16", "fp16"
  bool compact_state = false;  // PrecisionConfig::compact_state
  std::string weight_update = "master";  // PrecisionConfig::weight_update: "master", "stochastic", "kahan"
  double epochs = 0;           // steps / batches_per_epoch
  int64_t steps = 0;           // global steps completed (including a resumed run's earlier ones)
  int64_t steps_this_run = 0;
  int64_t batch_size = 0;        // per process
  int world_size = 1;             // processes training together (data parallelism)
  int zero_stage = 0;             // TrainerOptions::zero_stage
  // How the gradients were averaged over the processes: "" for one process, else what reduced them
  // and where ("nccl, in device memory"; "mpi, host-staged from checked:0"; "mpi").
  std::string gradient_reduction;
  int64_t accumulation_steps = 1;  // TrainerOptions::accumulation_steps
  int64_t global_batch_size = 0;  // batch_size * world_size * accumulation_steps: the samples of one step
  // The training steps computed the head and loss fused (TrainerOptions::fused_lm_head on a language
  // model with the default loss).
  bool fused_lm_head = false;
  std::optional<double> test_accuracy;  // of the final evaluation (fraction in [0, 1])
  std::optional<double> test_loss;
  // Every evaluation of this fit() call, in step order (eval_every's, epoch ends', the final one).
  struct Eval {
    int64_t step = 0;
    EvalResult result;
  };
  std::vector<Eval> evals;
  double final_loss = 0;         // mean step loss over the last epoch with steps (the current partial one, if any)
  double step_ms_median = 0;     // over this run's steps after the warm-up
  double samples_per_sec = 0;    // global_batch_size / step_ms_median: every process together
  std::optional<double> gflops;  // flops_per_sample * samples_per_sec / 1e9
  int64_t peak_bytes = 0;        // peak tensor bytes of training (weights, grads, optimizer state, activations)
  // What the bytes at that peak were for (mixtrain/memory.h), and the op and module running then:
  // its total_bytes is peak_bytes (kOther without what was held before training: datasets, ...).
  memory::Breakdown peak_breakdown;
  int64_t skipped_steps = 0;     // steps skipped (GradScaler, or on_nonfinite = skip), over the whole run
  double final_scale = 1;        // loss scale after the last step (1 without a scaler)
  int threads = 0;               // get_num_threads()
  std::string cpu;               // cpu::cpu_name(): the processor the step times come from
  std::string isa;               // cpu::isa(): the instruction-set level the kernels ran at
  // How the precision's matrix products and convolutions computed: train::products (precision.h).
  std::string products;
  double train_seconds = 0;      // wall time of this fit() call
  int64_t num_parameters = 0;
  // Optimizer::model_state_bytes() at the end: params + grads + masters + optimizer state, and that
  // per parameter element (16 for fp32 or 16-bit + fp32 masters with AdamW, 12 with compact_state).
  // This process's: under ZeRO-1 its masters and optimizer state are its shard only.
  int64_t model_state_bytes = 0;
  double model_state_bytes_per_param = 0;
  int64_t optimizer_state_bytes = 0;  // masters + moments held by this process (Optimizer::state_bytes())
  uint64_t seed = 0;
  double lr = 0;  // the optimizer's lr (group 0) at the end
  // The schedule that set it: "cosine", "constant", or "custom" (TrainerOptions::lr_schedule), and
  // for "cosine" the factor it decays to.
  std::string lr_decay;
  double lr_min_factor = 0;
  int64_t warmup_steps = 0;
  std::string resumed_from;  // "" unless resumed

  std::string to_json(int indent = 2) const;
};

// The checkpoint in `dir` with the highest step metadata (checkpoint.safetensors or
// checkpoint-<step>.safetensors), or "" when there is none: where a killed or finished run resumes.
std::string find_latest_checkpoint(const std::string& dir);

class Trainer {
 public:
  // With the user's optimizer. For 16-bit parameters (mode b) the model must have been converted
  // (prepare_model) before the optimizer was built; an fp32 model is refused with that advice. With
  // compact_state the optimizer is switched to it (prepare_optimizer).
  Trainer(nn::Module& model, optim::Optimizer& optimizer, const data::Dataset& train_data,
          const data::Dataset* eval_data, TrainerOptions options);
  // Converts the model (prepare_model), builds the optimizer from its named parameters and prepares
  // it (prepare_optimizer).
  Trainer(nn::Module& model, const OptimizerFactory& make_optimizer, const data::Dataset& train_data,
          const data::Dataset* eval_data, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the current position (after options.resume_from, if given) to total_steps(),
  // evaluates, writes the files and returns the summary.
  TrainSummary fit();

  // Loss and accuracy over `data` (options.eval_max_batches batches at most): eval mode, no grad,
  // the training autocast. The model's training mode is restored afterwards.
  EvalResult evaluate(const data::Dataset& data);

  // The full training state, atomically (refused with NonFiniteError when a parameter is not
  // finite); and back (validated against this run's settings, see "Resume is exact or refused").
  // Under ZeRO-1 both are collective: every rank calls them, each saves or loads its shard of the
  // optimizer state, and rank 0 writes the checkpoint file last.
  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);

  // The settings a checkpoint of this run records (name -> JSON value), and the names of those that
  // options.resume_overrides may not change.
  std::map<std::string, std::string> trajectory_settings() const;
  static const std::vector<std::string>& fixed_settings();

  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  const TrainerOptions& options() const { return options_; }

  int64_t step() const { return step_; }             // steps completed
  int64_t epoch() const { return epoch_; }           // 0-based epoch of the next step
  int64_t batch_in_epoch() const { return batch_; }  // 0-based step within the epoch of the next step
  // Optimizer steps per epoch: the loader's batches per epoch, divided by accumulation_steps.
  int64_t batches_per_epoch() const;
  int64_t total_steps() const;
  // After a resume with resume_overrides: the settings that changed ("lr = 0.001 in the checkpoint,
  // 0.01 in this run; ..."), "" when none did.
  const std::string& applied_overrides() const { return applied_overrides_; }

 private:
  struct RunState;  // per-fit() timing and output files

  // What both public constructors share: the members other than the optimizer, and the checks of
  // the options.
  Trainer(nn::Module& model, const data::Dataset& train_data, const data::Dataset* eval_data, TrainerOptions options);
  // Where the model's parameters live (the CPU for a model without any): batches, which datasets
  // make on the host, are moved there, and autocast runs for its device type.
  Device model_device() const;
  // The FP8 region of a forward: enabled with the recipe for precision fp8, disabled otherwise.
  amp::Fp8AutocastOptions fp8_region() const {
    return {.enabled = options_.precision.precision == Precision::kFp8, .recipe = options_.precision.fp8};
  }
  // The lr of the 0-based step `step` (lr_schedule, or warmup then LrDecay from the initial lr).
  std::optional<double> scheduled_lr(int64_t step) const;
  // The examples in `count` micro-batches of the epoch from micro-batch `first` on (this process's).
  int64_t micro_batch_samples(int64_t first, int64_t count) const;
  // One optimisation step on `micro_batches` batches from `batch` on (the iterator is left on the
  // last one); returns the StepInfo fields it knows. The time spent waiting for batches after the
  // first is added to data_wait_ms.
  StepInfo train_step(data::DataLoader::Iterator& batch, int64_t micro_batches, double& data_wait_ms);
  // Forward and loss of one batch inside the precision's autocast region.
  Tensor forward_loss(const data::Batch& batch, Device device);
  // The model as a fused head's language model when training steps use linear_cross_entropy
  // (fused_lm_head, the default loss, a LinearHeadLanguageModel); null otherwise.
  nn::LinearHeadLanguageModel* fused_head_model() const;
  void finish_epoch(RunState& run, bool evaluate_at_end);
  // Evaluation during training, kept out of the training peak; recorded in last_eval_ and run.evals.
  const EvalResult& evaluate_now(RunState& run);
  // metrics.jsonl and on_step (in metrics.cpp, with the summary).
  void log_step(RunState& run, const StepInfo& info);
  TrainSummary make_summary(const RunState& run) const;
  uint64_t data_fingerprint() const;
  void sync_after_backward(StepInfo& info);

  nn::Module* model_;
  optim::Optimizer* optimizer_;
  double base_lr_ = 0;  // the optimizer's lr when the Trainer was built (what LrDecay decays from)
  std::unique_ptr<optim::Optimizer> owned_optimizer_;
  const data::Dataset* train_data_;
  const data::Dataset* eval_data_;
  TrainerOptions options_;
  data::DataLoader loader_;
  amp::GradScaler scaler_;

  // Position and running statistics (all saved in checkpoints).
  int64_t step_ = 0, epoch_ = 0, batch_ = 0;
  int64_t skipped_steps_ = 0;
  double epoch_loss_sum_ = 0;  // steps of the current epoch
  int64_t epoch_loss_count_ = 0;
  double last_epoch_loss_ = 0;  // mean of the last finished epoch
  bool fresh_ = true;           // no checkpoint loaded
  std::string resumed_from_;
  std::optional<EvalResult> last_eval_;
  int64_t last_eval_step_ = -1;
  std::string applied_overrides_;
  bool out_dir_ready_ = false;                   // out_dir was checked and readied for this Trainer
  std::shared_ptr<io::DirectoryLock> out_dir_lock_;  // held from fit() on (rank 0, with out_dir)
  mutable std::optional<uint64_t> fingerprint_;  // of the training data, computed once
  std::unique_ptr<dist::DistributedDataParallel> ddp_;  // with a process group of several ranks
  dist::ZeroRedundancyOptimizer* zero_ = nullptr;       // optimizer_, when it shards its state
  std::unique_ptr<dist::ProcessGroup> own_group_;       // ZeRO-1 without a process group: one rank
  std::unique_ptr<nn::NonFiniteOrigin> origin_;         // with options.find_nonfinite_origin
  std::unique_ptr<nn::NumericsMonitor> numerics_;       // with options.numerics_report_dir

  int world_size() const { return options_.process_group ? options_.process_group->size() : 1; }
  int rank() const { return options_.process_group ? options_.process_group->rank() : 0; }
  // This process writes out_dir's files: out_dir is set and it is rank 0.
  bool writes_files() const { return !options_.out_dir.empty() && rank() == 0; }
  // This process takes part in writing checkpoints: rank 0, and every rank under ZeRO-1 (its shard).
  bool saves_checkpoints() const { return !options_.out_dir.empty() && (rank() == 0 || zero_ != nullptr); }
  // ZeRO-1 checkpoints (trainer_checkpoint.cpp): every rank writes its shard of the optimizer state
  // beside `path` (collective; returns the checkpoint's token), and reads back the shards of a
  // checkpoint written by `world` ranks that overlap its range.
  int64_t save_zero_shard(const std::string& path) const;
  // What load_checkpoint reads of `path`: names and shapes checked against this model and optimizer
  // from the header, before anything is allocated.
  io::SafetensorsSelect checkpoint_selection(const std::string& path) const;
  std::vector<dist::ZeroStatePiece> load_zero_shards(const std::string& path, int64_t step, int64_t world,
                                                     int64_t token) const;
  void adopt_optimizer();  // sets zero_ and checks it against the options
};

}  // namespace mixtrain::train
