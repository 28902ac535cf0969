// Training flags, --data parsing, dataset loading and TrainerOptions for the mixtrain CLI.
#include "cli_common.h"

#include <mixtrain/cpu.h>
#include <mixtrain/data/token_file.h>
#include <mixtrain/dist/process_group.h>
#include <mixtrain/io/file.h>
#include <mixtrain/io/hf_gpt2.h>
#include <mixtrain/parallel.h>
#include <mixtrain/random.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <string_view>

namespace mixtrain::cli {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A CLI11 validator from a function that throws on bad input: the message becomes CLI11's.
CLI::Validator throwing_validator(std::function<void(const std::string&)> check, const std::string& name) {
  return CLI::Validator(
      [check](std::string& value) -> std::string {
        try {
          check(value);
          return {};
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      name);
}

}  // namespace

CLI::Validator non_empty() {
  return CLI::Validator([](std::string& value) { return value.empty() ? std::string("must not be empty") : ""; }, "");
}

bool holds_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string() != io::kDirectoryLockFile) return true;
  return false;
}

DataSpec parse_data_spec(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? text.substr(colon + 1) : std::string();
  DataSpec spec;
  if (kind == "fashion-mnist") {
    spec.kind = DataSpec::Kind::kFashionMNIST;
    spec.path = has_arg ? arg : std::string(data::kFashionMNISTDefaultDir);
  } else if (kind == "mnist") {
    spec.kind = DataSpec::Kind::kMNIST;
    spec.path = arg;
  } else if (kind == "text") {
    spec.kind = DataSpec::Kind::kText;
    spec.path = arg;
  } else if (kind == "tokens") {
    spec.kind = DataSpec::Kind::kTokens;
    const size_t comma = arg.find(',');
    spec.path = arg.substr(0, comma);
    if (comma != std::string::npos) {
      spec.val_path = arg.substr(comma + 1);
      if (spec.val_path.empty() || spec.path.empty())
        throw UsageError("tokens:TRAIN.bin,VAL.bin needs two file names, got '" + arg + "'");
    }
  } else if (kind == "synthetic") {
    spec.kind = DataSpec::Kind::kSynthetic;
    if (has_arg) {
      size_t used = 0;
      long long n = 0;
      try {
        n = std::stoll(arg, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != arg.size() || used == 0 || n < 1 || n > (int64_t{1} << 30))
        throw UsageError("synthetic:N needs a size N between 1 and 2^30, got '" + arg + "'");
      spec.synthetic_size = n;
    }
  } else {
    throw UsageError("unknown data '" + text +
                     "' (valid: fashion-mnist[:DIR], mnist:DIR, text:FILE, tokens:TRAIN.bin[,VAL.bin], synthetic[:N])");
  }
  const bool file = spec.kind == DataSpec::Kind::kText || spec.kind == DataSpec::Kind::kTokens;
  if ((has_arg || spec.kind == DataSpec::Kind::kMNIST || file) && spec.kind != DataSpec::Kind::kSynthetic &&
      spec.path.empty())
    throw UsageError(kind + " needs a path: " + kind + (file ? ":FILE" : ":DIR"));
  return spec;
}

std::string describe(const DataSpec& spec) {
  switch (spec.kind) {
    case DataSpec::Kind::kFashionMNIST: return "Fashion-MNIST (" + spec.path + ")";
    case DataSpec::Kind::kMNIST: return "MNIST (" + spec.path + ")";
    case DataSpec::Kind::kText: return "text (" + spec.path + ")";
    case DataSpec::Kind::kTokens:
      return "tokens (" + spec.path + (spec.val_path.empty() ? "" : ", validation " + spec.val_path) + ")";
    case DataSpec::Kind::kSynthetic: return "synthetic (" + std::to_string(spec.synthetic_size) + " examples)";
  }
  return "?";
}

void add_run_flags(CLI::App& app, RunArgs& a, unsigned flags) {
  auto has = [&](Flags f) { return (flags & static_cast<unsigned>(f)) != 0; };
  if (has(Flags::kModel)) {
    app.add_option("--model", a.model, "Model: " + join(cli::model_names()))
        ->check(CLI::IsMember(cli::model_names()))
        ->capture_default_str();
    app.add_option("--init-from", a.init_from,
                   "gpt2: start from a Hugging Face directory (config.json and model.safetensors, as "
                   "GPT2LMHeadModel.save_pretrained writes them); the architecture comes from its config.json")
        ->check(CLI::ExistingDirectory);
    app.add_option("--gpt2-config", a.gpt2_config,
                   "gpt2 without --init-from: small (124M), medium (355M), large (774M), xl (1558M) or a config.json "
                   "file in Hugging Face's format")
        ->capture_default_str();
    app.add_option("--tokenizer", a.tokenizer,
                   "gpt2: its BPE tokenizer for --data text:FILE and --sample-every (a Hugging Face directory, "
                   "tokenizer.json or a .tiktoken file; default: the one in --init-from's directory). The run "
                   "directory gets a copy, so that generate and transformers read the run's tokens")
        ->check(CLI::ExistingPath);
    app.add_option("--context", a.context,
                   "gpt models: tokens per training sequence, at most the model's context (128 for gpt, 1024 for "
                   "gpt-small); shorter sequences train the same model faster and in less memory (0: the model's)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
        ->capture_default_str();
  }
  if (has(Flags::kData))
    app.add_option("--data", a.data,
                   "Data: fashion-mnist[:DIR] (default dir " + std::string(data::kFashionMNISTDefaultDir) +
                       "), mnist:DIR, text:FILE (gpt, gpt-small: bytes; gpt2: tokenized with its "
                       "tokenizer, the first 90% of the tokens train, the rest validate), tokens:TRAIN.bin[,VAL.bin] "
                       "(gpt2: llm.c's token files, see mixtrain tokenize), synthetic[:N] (random data, N examples)")
        ->check(throwing_validator([](const std::string& s) { parse_data_spec(s); }, "DATA"))
        ->capture_default_str();
  if (has(Flags::kPrecision)) {
    app.add_option("--precision", a.precision,
                   "Precision: fp32, bf16 (autocast bf16), fp16 (autocast fp16) or fp8 (autocast bf16 and Linear "
                   "layers in FP8: E4M3 forward, E5M2 gradients, delayed scaling; emulated on the CPU, for accuracy "
                   "studies)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
        ->capture_default_str();
    app.add_flag("--compact-state", a.compact_state,
                 "With --precision bf16 --master-weights bf16: keep each fp32 master as the bf16 weight plus its "
                 "lower 16 bits and AdamW's first moment in bf16: 12 bytes of model state per parameter instead of "
                 "16");
    app.add_option("--weight-update", a.weight_update,
                   "With --precision bf16 --master-weights bf16: how updates reach the bf16 weights: master (fp32 "
                   "master weights, 16 bytes of model state per parameter, 12 with --compact-state), stochastic (no "
                   "masters, stochastic rounding, bf16 AdamW moments: 8 bytes) or kahan (no masters, a bf16 Kahan "
                   "compensation, bf16 moments: 10 bytes); seeded by --seed. nearest (no masters, round to nearest: 8 "
                   "bytes, updates below half a bf16 step are lost) is there for comparison")
        ->check(CLI::IsMember({"master", "stochastic", "kahan", "nearest"}))
        ->capture_default_str();
    app.add_flag("--find-nonfinite-origin", a.trainer.find_nonfinite_origin,
                 "Check every op's outputs, forward and backward, and name the first one that made inf or NaN from "
                 "finite inputs (op, module, dtypes, shapes, step) in the divergence error and metrics.jsonl; "
                 "costs one extra read of every activation and gradient");
    app.add_option("--numerics-report", a.trainer.numerics_report_dir,
                   "Sample activations, gradients and parameters every --numerics-every steps against the fp16, "
                   "bf16 and FP8 ranges and write DIR/report.md (per module and op: amax, smallest value, what would "
                   "flush to zero or overflow, rounding error, a recommendation) and DIR/numerics.png");
    app.add_option("--numerics-every", a.trainer.numerics_every, "Steps between two samples of --numerics-report")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_flag("--checkpoint-activations", a.checkpoint_activations,
                 "Activation checkpointing: keep only each transformer block's input (gpt models) or each of about "
                 "sqrt(n) layer segments' input (other models) and recompute the rest during backward; less memory "
                 "for one more forward pass, gradients bit-identical");
    app.add_flag("--unfused-head", a.unfused_head,
                 "Language models (gpt, gpt-small, gpt2): compute the output head's logits whole and then the loss, "
                 "instead of the fused head and loss that works a block of rows at a time and never holds the "
                 "[batch, context, vocab] logits (the default; same loss, gradients within rounding)");
  }
  if (has(Flags::kCommon)) {
    app.add_option("--scaler", a.scaler, "GradScaler: auto (on for fp16 only), on, off")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    app.add_option("--fp8-format", a.fp8_format,
                   "--precision fp8: hybrid (E4M3 activations and weights, E5M2 gradients) or e4m3 (E4M3 for all)")
        ->check(CLI::IsMember({"hybrid", "e4m3"}))
        ->capture_default_str();
    app.add_option("--fp8-history", a.fp8_history,
                   "--precision fp8: steps of amax history each tensor's scale is computed from")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    app.add_option("--fp8-margin", a.fp8_margin, "--precision fp8: scales divided by 2^MARGIN (headroom)")
        ->check(CLI::Range(0, 32))
        ->capture_default_str();
    app.add_option("--fp8-amax", a.fp8_amax,
                   "--precision fp8: max (the largest amax of the history) or most_recent (the last one)")
        ->check(CLI::IsMember({"max", "most_recent"}))
        ->capture_default_str();
    app.add_option("--batch-size", a.trainer.batch_size, "Examples per step")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
        ->capture_default_str();
    app.add_option("--seed", a.trainer.seed, "Seed of the model init, data order and every generator")->capture_default_str();
    app.add_option("--threads", a.threads, "CPU threads (0: one per logical processor)")
        ->check(CLI::Range(0, kMaxThreads))
        ->capture_default_str();
    app.add_option("--device", a.device, "Where the model trains: " + device_help())
        ->capture_default_str();
  }
  if (has(Flags::kTraining)) {
    app.add_option("--epochs", a.trainer.epochs, "Epochs over the training set")
        ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
        ->capture_default_str();
    app.add_option("--steps", a.trainer.max_steps, "Stop after this many steps in total (overrides --epochs; 0: off)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--lr", a.lr, "AdamW learning rate")
        ->check(CLI::Range(std::numeric_limits<double>::min(), 1e6))
        ->capture_default_str();
    app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    app.add_option("--lr-decay", a.lr_decay,
                   "Learning-rate decay over the run: cosine (to --lr-min-factor x --lr) or constant")
        ->check(CLI::IsMember({"cosine", "constant"}))
        ->capture_default_str();
    app.add_option("--lr-min-factor", a.trainer.lr_min_factor, "Where cosine decay ends, as a fraction of --lr (0: decay to 0)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--augment", a.augment,
                   "Training-image augmentation: flip (mirror left-right with probability 1/2, drawn per "
                   "sample and epoch from the seed) or none; image models only")
        ->check(CLI::IsMember({"none", "flip"}))
        ->capture_default_str();
    app.add_option("--checkpoint-every", a.trainer.checkpoint_every,
                   "Write DIR/checkpoint-<step>.safetensors every N steps (0: only the final checkpoint)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--keep-checkpoints", a.trainer.keep_checkpoints,
                   "Keep only the newest N DIR/checkpoint-<step>.safetensors files (0: keep all)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--zero", a.trainer.zero_stage,
                   "ZeRO stage: 1 shards the optimizer state (fp32 masters, moments) over the mpirun processes, each "
                   "holding 1/N of it, with the same trajectory as 0 (every process holds all of it); checkpoints "
                   "then save one shard per process beside the checkpoint and resume on any number of processes")
        ->check(CLI::Range(0, 1))
        ->capture_default_str();
    app.add_option("--grad-clip", a.grad_clip,
                   "Clip the total 2-norm of the gradients to NORM before each optimizer step, after the GradScaler "
                   "unscales them (PyTorch's unscale_, clip_grad_norm_, step); a step the scaler skips stays skipped. "
                   "The norm before clipping goes to metrics.jsonl (grad_norm) and the progress line. 0: off")
        ->check(CLI::Range(0.0, 1e12))
        ->capture_default_str();
    app.add_option("--grad-accum", a.trainer.accumulation_steps,
                   "Gradient accumulation: N micro-batches of --batch-size per optimizer step (PyTorch's AMP recipe: "
                   "one loss scale for all of them, one unscale, inf check, clip, step and scale update per step; "
                   "the result is the step of one batch N times larger). Steps and every --*-every count "
                   "optimizer steps")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
        ->capture_default_str();
    app.add_option("--global-batch-size", a.global_batch_size,
                   "Examples per optimizer step over every process: sets --grad-accum to G / (--batch-size x "
                   "processes), which must divide; keeps a run's batch when it resumes on another number of "
                   "processes (0: use --grad-accum)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--warmup-steps", a.trainer.warmup_steps,
                   "Raise the learning rate linearly from 0 to --lr over the first N steps, then --lr-decay "
                   "(transformers' cosine/constant schedules with warmup)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--eval-every", a.trainer.eval_every,
                   "Evaluate on the validation data every N steps and after the last (loss; perplexity for language "
                   "models, accuracy for classifiers) into metrics.jsonl, the progress output and summary.json "
                   "(0: at each epoch's end only)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--eval-batches", a.trainer.eval_max_batches,
                   "Evaluate on the first M validation batches only (0: all of them)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_flag("--no-tensorboard", a.no_tensorboard,
                 "Write no TensorBoard event file (by default each run writes events.out.tfevents.* beside "
                 "metrics.jsonl, with the same numbers: tensorboard --logdir DIR)");
    app.add_option("--sample-every", a.sample_every,
                   "Language models: print a short text generated from the model every N steps (0: never)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--log-every", a.trainer.log_every, "Write every N-th step to metrics.jsonl")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--on-nonfinite", a.on_nonfinite,
                   "When the loss, a gradient or a weight becomes inf/NaN outside the GradScaler's normal skipping: "
                   "stop (exit code 3, no file overwritten), skip the step, or continue")
        ->check(CLI::IsMember({"stop", "skip", "continue"}))
        ->capture_default_str();
    app.add_flag("--overwrite", a.trainer.overwrite,
                 "Replace the run files (metrics, summary, model, checkpoints) of another run in the output "
                 "directory; without it a non-empty output directory is refused");
  }
  if (has(Flags::kResume)) {
    app.add_option("--resume", a.trainer.resume_from,
                   "Continue from a training checkpoint, bit for bit (the run's settings must match it), or 'auto': "
                   "from the newest checkpoint in --out if there is one, else from the start")
        ->check(throwing_validator(
            [](const std::string& s) {
              if (s != "auto" && !std::filesystem::exists(s))
                throw UsageError(mixtrain::detail::quote_untrusted(s, 256) + " does not exist");  // CLI11 names the flag
            },
            "FILE|auto"));
    app.add_option("--resume-override", a.trainer.resume_overrides,
                   "Settings a resume may change from the checkpoint's (comma-separated names, as a refused resume "
                   "lists them: lr, weight_decay, total_steps, seed, data, ...)")
        ->delimiter(',');
  }
}

cli::ModelInfo with_sequence_length(cli::ModelInfo info, nn::GPTConfig config, int64_t tokens) {
  config.context = tokens;
  info.sample_shape = {tokens};
  info.flops_per_sample = cli::gpt_model_info(config).flops_per_sample;
  return info;
}

int apply_threads(int threads) {
  const int n = threads > 0 ? threads : std::min(num_processors(), kMaxThreads);
  set_num_threads(n);
  return n;
}

std::string device_help() {
  std::string text;
  for (const DeviceTypeInfo& d : device_types()) {
    if (!text.empty()) text += ", or ";
    text += d.name;
    if (d.indexed) text += std::string(" / ") + d.name + ":N";
    text += std::string(" (") + d.summary + (d.built ? "" : "; not in this build") + ")";
  }
  return text + ". Under mpirun a name without :N picks this host's process number modulo its devices";
}

Device parse_device(const std::string& text) {
  Device device;
  try {
    device = mixtrain::parse_device(text);
  } catch (const Error& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  // One process per GPU under mpirun: "cuda" without an index means this host's process number
  // modulo the GPUs it has (rank 1 of a node on cuda:1), as NCCL needs one GPU per rank.
  if (dist::launched_by_mpi() && text.find(':') == std::string::npos) {
    const int count = device_count(device.type);
    for (const DeviceTypeInfo& info : device_types())
      if (info.type == device.type && info.indexed && count > 1)
        device.index = static_cast<int16_t>(dist::launcher_local_rank() % count);
  }
  return device;
}

std::string random_text(int64_t n, uint64_t seed) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int64_t block = 0; block * 16 < n; ++block) {
    const std::array<uint32_t, 4> r = random::philox(static_cast<uint64_t>(block), seed, /*stream=*/7);
    for (int64_t k = 0; k < 16 && block * 16 + k < n; ++k)
      s[static_cast<size_t>(block * 16 + k)] = static_cast<char>((r[k / 4] >> (8 * (k % 4))) & 0xff);
  }
  return s;
}

std::string describe_lr_decay(const RunArgs& a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "cosine decay to %gx", a.trainer.lr_min_factor);
  const std::string decay = a.lr_decay == "constant" ? "constant" : buf;
  if (a.trainer.warmup_steps == 0) return decay;
  return std::to_string(a.trainer.warmup_steps) + " warmup steps, then " + decay;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string text_table(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (size_t r = 0; r < cells.size(); ++r) {
    for (size_t c = 0; c < cells[r].size(); ++c) {
      const std::string& v = cells[r][c];
      const std::string pad(width[c] - v.size(), ' ');
      out += c == 0 ? v + pad : "  " + pad + v;  // first column left-aligned, numbers right-aligned
    }
    out += '\n';
    if (r == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total - 2, '-') + '\n';
    }
  }
  return out;
}

std::string markdown_table(const std::vector<std::vector<std::string>>& cells) {
  std::string out;
  for (size_t r = 0; r < cells.size(); ++r) {
    out += "|";
    for (const std::string& v : cells[r]) out += " " + v + " |";
    out += '\n';
    if (r == 0) {
      out += "|---|";
      for (size_t c = 1; c < cells[r].size(); ++c) out += "---:|";
      out += '\n';
    }
  }
  return out;
}

// The breakdown's rows, in the order a step allocates them; the categories show their share of the
// peak, the peak and the cache (which is not in it) do not.
std::vector<std::vector<std::string>> breakdown_cells(const std::vector<std::pair<std::string, memory::Breakdown>>& runs) {
  using memory::Category;
  struct Line {
    const char* label;
    std::function<int64_t(const memory::Breakdown&)> bytes;
    bool share = true;
  };
  const auto of = [](Category c) { return [c](const memory::Breakdown& b) { return b[c]; }; };
  const std::vector<Line> lines = {
      {"parameters", of(Category::kParameters)},
      {"master weights", of(Category::kMasterWeights)},
      {"gradients", of(Category::kGradients)},
      {"optimizer state", of(Category::kOptimizerState)},
      {"saved activations", of(Category::kActivations)},
      {"gradients in flight", of(Category::kActivationGradients)},
      {"running op's temporaries", [](const memory::Breakdown& b) { return b.op_temporary_bytes; }},
      {"other (batch, buffers)", of(Category::kOther)},
      {"peak tensor bytes", [](const memory::Breakdown& b) { return b.total_bytes; }, false},
      {"allocator cache (not in the peak)", [](const memory::Breakdown& b) { return b.cached_bytes; }, false},
  };
  std::vector<std::vector<std::string>> cells = {{"at the peak"}};
  for (const auto& [name, b] : runs) cells[0].push_back(name);
  for (const Line& line : lines) {
    cells.push_back({line.label});
    for (const auto& [name, b] : runs) {
      const int64_t n = line.bytes(b);
      std::string cell = human_bytes(static_cast<double>(n));
      if (line.share && b.total_bytes > 0) {
        char share[32];
        std::snprintf(share, sizeof share, " (%.0f%%)", 100.0 * static_cast<double>(n) / static_cast<double>(b.total_bytes));
        cell += share;
      }
      cells.back().push_back(cell);
    }
  }
  cells.push_back({"running then"});
  for (const auto& [name, b] : runs) {
    std::string where = b.op.empty() ? "no op" : b.op;
    if (!b.module.empty()) where += " in " + b.module;
    cells.back().push_back(where + ", " + std::string(memory::phase_name(b.phase)));
  }
  return cells;
}

}  // namespace mixtrain::cli
