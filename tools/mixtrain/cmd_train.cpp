// mixtrain train: one training run through mt::train::Trainer.
#include <mixtrain/error.h>
#include <mixtrain/io/checkpoint.h>
#include <mixtrain/io/file.h>
#include <mixtrain/io/hf_gpt2.h>
#include <mixtrain/io/safetensors.h>
#include "models.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "mixtrain/nn/generation.h"
#include "mixtrain/text/tokenizer.h"
#include "run_setup.h"
#include "mixtrain/dist/process_group.h"
#include "mixtrain/nn/checkpoint.h"
#include "gnuplot.h"
#include "progress.h"

namespace mixtrain::cli {

namespace {

// DIR/numerics.gp over the report's DIR/numerics.dat: each site's largest and smallest non-zero
// magnitude against the fp16 and FP8 E4M3 ranges; runs gnuplot into DIR/numerics.png and links the
// image from DIR/report.md. Returns whether the image was made.
bool plot_numerics(const std::string& dir) {
  const std::string abs = std::filesystem::absolute(dir).string();
  const std::string dat = abs + "/numerics.dat", png = abs + "/numerics.png", gp = abs + "/numerics.gp";
  const std::string script =
      "# gnuplot script written by mixtrain train --numerics-report: gnuplot numerics.gp (in this directory)\n"
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1200,540 noenhanced } "
      "else { set terminal png size 1200,540 noenhanced }\n"
      "if (!exists('out')) out = '" + png + "'\n"
      "set output out\n"
      "set title 'magnitudes per site (activations, gradients, parameters) against the fp16 and FP8 E4M3 ranges'\n"
      "set xlabel 'site (numerics.dat row: backward, forward, grad, param sites, each group sorted by name)'\nset ylabel '|x|'\nset logscale y\nset grid\n"
      "set format y '1e%L'\nset key outside right\n"
      "plot '" + dat + "' using 1:2 with points pt 7 ps 0.6 title 'amax', "
      "'" + dat + "' using 1:($3 > 0 ? $3 : 1/0) with points pt 6 ps 0.6 title 'smallest non-zero', "
      "65504 with lines dt 2 lc rgb 'red' title 'fp16 max', "
      "2**-14 with lines dt 3 lc rgb 'red' title 'fp16 min normal', "
      "2**-24 with lines dt 4 lc rgb 'red' title 'fp16 min subnormal', "
      "448 with lines dt 2 lc rgb 'blue' title 'e4m3 max', "
      "2**-9 with lines dt 4 lc rgb 'blue' title 'e4m3 min subnormal'\n";
  io::write_file_atomic(gp, script, "mixtrain train");
  if (!run_gnuplot(gp, png)) return false;
  std::ofstream md(dir + "/report.md", std::ios::app);
  md << "\n![magnitudes per site](numerics.png)\n";
  return md.good();
}

// A short text from the model as it trains (--sample-every): sampled (temperature 1, top-k 40, the
// same stream at every step) from the end-of-text token, or a newline for byte models, in eval mode;
// the training mode and every training generator are left as they were.
void print_sample(nn::Module& model, const TextCodec& codec, Device device, const std::string& label, int64_t step) {
  auto* decoder = dynamic_cast<nn::IncrementalDecoder*>(&model);
  if (decoder == nullptr) return;
  const std::optional<int64_t> eot = codec.end_of_text();
  const std::vector<int64_t> prompt = eot ? std::vector<int64_t>{*eot} : codec.encode("\n");
  nn::GenerateOptions o{.max_new_tokens = std::min<int64_t>(64, decoder->max_positions() - 1),
                        .temperature = 1.0,
                        .top_k = 40,
                        .seed = 1234,
                        .stop_token = eot.value_or(-1)};
  const bool training = model.is_training();
  model.eval();
  std::vector<int64_t> out = nn::generate(*decoder, prompt, o, device);
  model.train(training);
  if (!out.empty() && eot && out.back() == *eot) out.pop_back();
  std::string text = text::printable(codec.decode(out));
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';  // one line in the log
  if (Progress::stdout_is_terminal()) std::printf("\r\033[2K");  // over the progress bar
  std::printf("%ssample at step %lld: %s\n", label.c_str(), static_cast<long long>(step), text.c_str());
  std::fflush(stdout);
}

}  // namespace

static CLI::App* add_train_flags(CLI::App& app, RunArgs& args) {
  CLI::App* cmd = app.add_subcommand("train", "Train a model in one precision and write metrics, summary and weights");
  add_run_flags(*cmd, args,
                Flags::kModel | Flags::kData | Flags::kPrecision | Flags::kTraining | Flags::kResume | Flags::kCommon);
  cmd->add_option("--master-weights", args.master_weights,
                  "Parameter dtype: fp32 (fp32 weights through autocast) or bf16/fp16 (16-bit weights, fp32 masters "
                  "in the optimizer; must equal --precision)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--out", args.out, "Output directory (default runs/train)")->check(non_empty());
  return cmd;
}

train::TrainSummary run_training(const RunArgs& args, train::Precision precision, DType param_dtype,
                                 const LoadedData& data, const std::string& out_dir, const std::string& label,
                                 RunCurves* curves) {
  auto model = make_run_model(args);
  if (args.checkpoint_activations) nn::set_activation_checkpointing(*model, true);
  model->to(parse_device(args.device));  // the Trainer moves each batch to the model's device
  train::TrainerOptions o = trainer_options(args, precision, param_dtype);
  if (dist::launched_by_mpi()) o.process_group = &dist::world();
  o.out_dir = out_dir;
  const ModelKind& kind = find_model(args.model);
  o.save_model = kind.saver(args);
  // The run directory holds the tokenizer of a model of tokens, written before the first step, so
  // that generate and transformers read the run's weights and checkpoints as text at any time.
  const std::unique_ptr<TextCodec> codec = run_codec(args);
  const bool writes = !dist::launched_by_mpi() || dist::world().rank() == 0;
  if (codec != nullptr && kind.reads() == Reads::kTokens) {
    RunArgs whole = args;
    whole.context = 0;  // the model's positions, not the training sequences'
    const int64_t context = kind.describe(whole).sample_shape[0];
    o.write_run_files = [&codec, context](const std::string& dir) { codec->save(dir, context); };
  }
  Progress progress(label, Progress::stdout_is_terminal());
  progress.attach(o);
  if (curves != nullptr) {
    o.on_step = [&progress, curves](const train::StepInfo& i) {
      curves->losses.push_back(i.loss);
      progress.on_step(i);
    };
    o.on_epoch = [&progress, curves](const train::EpochInfo& i) {
      const bool has = i.eval && i.eval->accuracy;
      curves->epoch_accuracy.push_back(has ? 100.0 * *i.eval->accuracy : std::nan(""));
      progress.on_epoch(i);
    };
  }
  if (args.sample_every > 0 && codec == nullptr)
    throw UsageError("--sample-every prints text: model " + args.model + " has no tokenizer here; give --tokenizer "
                     "DIR|FILE, or --init-from a directory that holds one");
  if (args.sample_every > 0 && writes) {
    const Device device = parse_device(args.device);
    o.on_step = [on_step = o.on_step, &model, &codec, device, label, every = args.sample_every](
                    const train::StepInfo& i) {
      if (on_step) on_step(i);
      if (i.step % every == 0) print_sample(*model, *codec, device, label, i.step);
    };
  }
  train::Trainer trainer(*model, train::adamw(args.lr, args.weight_decay), *data.train, data.eval.get(), o);
  if (!o.resume_from.empty()) {
    // Loaded here rather than in fit() so that the banner can say what the resume changed.
    trainer.load_checkpoint(o.resume_from);
    std::printf("%sresuming from %s at step %lld of %lld%s%s\n", label.c_str(), o.resume_from.c_str(),
                static_cast<long long>(trainer.step()), static_cast<long long>(trainer.total_steps()),
                trainer.applied_overrides().empty() ? "" : "; overridden: ", trainer.applied_overrides().c_str());
    std::fflush(stdout);
  }
  train::TrainSummary s = trainer.fit();
  progress.finish();
  return s;
}

namespace {

// A quick look at a resume file before the data is loaded: missing, corrupt and weights-only files
// fail here, in a fraction of a second. The Trainer validates the rest when it loads it.
void precheck_resume(const std::string& path) {
  const io::SafetensorsHeader h = io::read_safetensors_header(path);
  MT_CHECK(h.metadata.contains(io::kCheckpointVersionKey), "--resume: '", path,
           "' is a safetensors file but not a mixtrain training checkpoint (use DIR/checkpoint.safetensors or ",
           "DIR/checkpoint-<step>.safetensors)");
}

}  // namespace

static int run_train(const RunArgs& in) {
  RunArgs a = in;
  const ModelKind& kind = find_model(a.model);
  if (a.out.empty()) a.out = "runs/train";
  const DataSpec spec = parse_data_spec(a.data);
  const train::Precision precision = train::parse_precision(a.precision);
  check_combination(a, spec, precision);
  parse_device(a.device);  // an unusable --device is refused before the data is loaded
  const DType param_dtype = train::parse_param_dtype(a.master_weights);
  // The directory is this run's from here to exit, before anything in it is read (rank 0 writes it).
  std::shared_ptr<io::DirectoryLock> lock;
  if (!dist::launched_by_mpi() || dist::world().rank() == 0) lock = io::DirectoryLock::acquire(a.out, "--out");
  if (a.trainer.resume_from == "auto") {
    // The newest checkpoint of this output directory, or a fresh start that replaces the files of the
    // interrupted attempt (the directory is this run's: that is what auto says).
    a.trainer.resume_from = train::find_latest_checkpoint(a.out);
    if (a.trainer.resume_from.empty()) a.trainer.overwrite = true;
  }
  if (!a.trainer.resume_from.empty()) precheck_resume(a.trainer.resume_from);
  const int threads = apply_threads(a.threads);
  const cli::ModelInfo info = run_model_info(a);
  const bool scaler = train::uses_scaler(precision, train::parse_scaler_mode(a.scaler));

  const std::unique_ptr<TextCodec> codec = run_codec(a);
  LoadedData data = load_data(spec, a, info, codec.get());
  std::printf("mixtrain train: %s (%lld parameters) on %s, %lld training examples\n", a.model.c_str(),
              static_cast<long long>(info.num_parameters), describe(spec).c_str(),
              static_cast<long long>(data.train->size()));
  const int world = processes();
  const std::string batch = describe_batch(a, world);
  std::printf("precision %s (scaler %s, %s parameters), batch %s, AdamW lr %g (%s) wd %g, seed %llu, %d threads%s\n",
              a.precision.c_str(), scaler ? "on" : "off", a.master_weights.c_str(), batch.c_str(), a.lr,
              describe_lr_decay(a).c_str(), a.weight_decay, static_cast<unsigned long long>(a.trainer.seed), threads,
              world == 1 ? "" : " per process");
  for (const std::string& line : kind.banner(a)) std::printf("%s\n", line.c_str());
  if (codec != nullptr && kind.reads() == Reads::kTokens) std::printf("tokenizer %s\n", codec->describe().c_str());
  std::printf("cpu %s\n", cpu::describe().c_str());
  std::printf("products %s\n", train::products(precision, parse_device(a.device)).c_str());
  std::fflush(stdout);

  const train::TrainSummary s = run_training(a, precision, param_dtype, data, a.out, "");
  std::printf("done: %lld steps (%.2f epochs), %lld in this run, %.1f s\n", static_cast<long long>(s.steps), s.epochs,
              static_cast<long long>(s.steps_this_run), s.train_seconds);
  if (s.test_accuracy) std::printf("  test accuracy  %.2f%%\n", 100.0 * *s.test_accuracy);
  if (s.test_loss) std::printf("  test loss      %.4f\n", *s.test_loss);
  std::printf("  final loss     %.4f (mean over the last epoch)\n", s.final_loss);
  std::printf("  step time      %.2f ms (median), %.0f samples/s", s.step_ms_median, s.samples_per_sec);
  if (s.gflops) std::printf(", %.1f GFLOP/s", *s.gflops);
  std::printf("\n  peak memory    %s%s\n", human_bytes(static_cast<double>(s.peak_bytes)).c_str(),
              s.fused_lm_head ? " (head and loss fused; --unfused-head: whole logits)" : "");
  if (!s.gradient_reduction.empty())
    std::printf("  gradients      averaged over %d processes by %s\n", s.world_size, s.gradient_reduction.c_str());
  std::printf("  optimizer state %s%s\n", human_bytes(static_cast<double>(s.optimizer_state_bytes)).c_str(),
              s.zero_stage == 1 ? (" per process (ZeRO-1: sharded over " + std::to_string(s.world_size) + ")").c_str()
                                : s.world_size > 1 ? " per process (every process holds all of it)" : "");
  std::printf("  skipped steps  %lld, final scale %g\n", static_cast<long long>(s.skipped_steps), s.final_scale);
  std::string files = "metrics.jsonl, summary.json";
  for (const std::string& f : kind.files()) files += ", " + f;
  if (codec != nullptr && kind.reads() == Reads::kTokens) files += ", the tokenizer's files";
  std::printf("  wrote          %s/{%s, checkpoint.safetensors}\n", a.out.c_str(), files.c_str());
  if (!a.no_tensorboard) std::printf("  tensorboard    tensorboard --logdir %s\n", a.out.c_str());
  if (!a.trainer.numerics_report_dir.empty()) {
    const bool plotted = plot_numerics(a.trainer.numerics_report_dir);
    std::printf("  numerics       %s/report.md%s\n", a.trainer.numerics_report_dir.c_str(), plotted ? ", numerics.png" : "");
  }
  return 0;
}

namespace {

class TrainCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_train_flags(app, args_); }
  void check() const override {
    check_run_flags(args_, {args_.precision});
    train::parse_param_dtype(args_.master_weights);
  }
  int run() override { return run_train(args_); }

 private:
  RunArgs args_;
};

}  // namespace

std::unique_ptr<Command> make_train_command() { return std::make_unique<TrainCommand>(); }

}  // namespace mixtrain::cli
