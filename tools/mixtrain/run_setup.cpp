// The pieces of a run that depend on its model (run_setup.h).
#include "run_setup.h"

#include <mixtrain/data/token_file.h>
#include <mixtrain/dist/process_group.h>
#include <mixtrain/io/file.h>

#include <cmath>

namespace mixtrain::cli {

namespace {

// The names of the models that read `what`, for messages ("gpt, gpt-small").
std::string models_reading(Reads what) {
  std::string names;
  for (const ModelKind* m : model_table())
    if (m->reads() == what) names += (names.empty() ? "" : ", ") + m->name();
  return names;
}

}  // namespace

ModelInfo run_model_info(const RunArgs& a) { return find_model(a.model).describe(a); }

std::shared_ptr<nn::Module> make_run_model(const RunArgs& a) { return find_model(a.model).build(a); }

void check_combination(const RunArgs& a, const DataSpec& spec, train::Precision precision) {
  const ModelKind& model = find_model(a.model);
  model.describe(a);  // the model's own flags
  const bool text = spec.kind == DataSpec::Kind::kText, tokens = spec.kind == DataSpec::Kind::kTokens;
  const bool synthetic = spec.kind == DataSpec::Kind::kSynthetic;
  switch (model.reads()) {
    case Reads::kTokens:
      if (!(tokens || text || synthetic))
        throw UsageError("model " + a.model + " reads BPE tokens: use --data tokens:TRAIN.bin[,VAL.bin] (llm.c's "
                         "token files), text:FILE (tokenized with the model's tokenizer) or synthetic");
      break;
    case Reads::kBytes:
      if (!(text || synthetic))
        throw UsageError("model " + a.model + " is a byte-level language model: use --data text:FILE or --data synthetic");
      break;
    case Reads::kImages:
      if (text || tokens)
        throw UsageError("model " + a.model + " classifies 28x28 images: --data " +
                         (text ? "text:FILE needs a language model (" + models_reading(Reads::kBytes) + ", " +
                                     models_reading(Reads::kTokens) + ")"
                               : "tokens:FILE needs a model of BPE tokens (" + models_reading(Reads::kTokens) + ")"));
      break;
  }
  if (model.is_language_model() && a.augment != "none")
    throw UsageError("--augment " + a.augment + " mirrors images; model " + a.model + " reads token sequences");
  if (!a.tokenizer.empty() && model.reads() != Reads::kTokens)
    throw UsageError("--tokenizer gives the BPE tokenizer of a model of tokens (" + models_reading(Reads::kTokens) +
                     "); model " + a.model + (model.is_language_model() ? " reads bytes" : " classifies images"));
  if (a.unfused_head && !model.is_language_model())
    throw UsageError("--unfused-head computes a language model's logits whole before the loss; model " + a.model +
                     " classifies images and has no fused head to turn off");
  if (a.sample_every > 0 && !model.generates())
    throw UsageError("--sample-every prints generated text; model " + a.model + " does not generate");
  if (precision == train::Precision::kFp8 && a.checkpoint_activations)
    throw UsageError("--checkpoint-activations cannot be used with --precision fp8: the recomputed forward would "
                     "quantise with scales that changed since the forward");
  // compare's "same" gives each 16-bit run parameters of its own dtype, valid by construction.
  if (a.master_weights == "same") return;
  const train::PrecisionConfig c{.precision = precision,
                                 .param_dtype = train::parse_param_dtype(a.master_weights),
                                 .compact_state = a.compact_state,
                                 .weight_update = train::parse_weight_update(a.weight_update)};
  try {
    train::validate(c);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

void check_run_flags(const RunArgs& a, const std::vector<std::string>& precisions) {
  const DataSpec spec = parse_data_spec(a.data);
  for (const std::string& p : precisions) check_combination(a, spec, train::parse_precision(p));
  train::parse_nonfinite_policy(a.on_nonfinite);
}

std::unique_ptr<TextCodec> run_codec(const RunArgs& a) {
  const ModelKind& model = find_model(a.model);
  if (!model.is_language_model()) return nullptr;
  if (!a.tokenizer.empty()) return model.codec(a, a.tokenizer, /*required=*/true);
  return model.codec(a, a.init_from, /*required=*/false);
}

namespace {

// text:FILE for a model of BPE tokens: the file is one document, <|endoftext|> first when the
// vocabulary has it (as llm.c's data scripts write token files); the first 90% of the tokens train,
// the rest validate (TextDataset's split of bytes, in tokens).
LoadedData tokenized_text(const DataSpec& spec, const RunArgs& a, const ModelInfo& info, const TextCodec* codec) {
  if (codec == nullptr)
    throw UsageError("--data text:FILE: model " + a.model + " reads BPE tokens and has no tokenizer here: give "
                     "--tokenizer DIR|FILE (a Hugging Face tokenizer directory, tokenizer.json or a .tiktoken file), "
                     "or --init-from a directory that holds one");
  const int64_t context = info.sample_shape[0];
  const std::string text = io::read_file(spec.path, data::TextOptions{}.max_bytes, "--data text");
  std::vector<int64_t> ids;
  if (const std::optional<int64_t> eot = codec->end_of_text()) ids.push_back(*eot);
  const std::vector<int64_t> body = codec->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  std::vector<uint16_t> tokens(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MT_CHECK(ids[i] >= 0 && ids[i] < info.num_outputs && ids[i] <= 65535, "--data text: '", spec.path,
             "': the tokenizer (", codec->describe(), ") gives token ", ids[i], ", outside model ", a.model,
             "'s vocabulary of ", info.num_outputs);
    tokens[i] = static_cast<uint16_t>(ids[i]);
  }
  const size_t n_train = static_cast<size_t>(std::llround(static_cast<double>(tokens.size()) * 0.9));
  const std::string name = spec.path + " (" + std::to_string(tokens.size()) + " tokens)";
  MT_CHECK(static_cast<int64_t>(n_train) > context && static_cast<int64_t>(tokens.size() - n_train) > context,
           "--data text: '", spec.path, "' is ", tokens.size(), " tokens: too short for a 90/10 split into windows of ",
           context + 1, " tokens (give more text or a shorter --context)");
  LoadedData d;
  d.train = std::make_unique<data::TokenFileDataset>(data::TokenFileDataset::from_tokens(
      std::vector<uint16_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_train)), context,
      info.num_outputs, {}, name));
  d.eval = std::make_unique<data::TokenFileDataset>(data::TokenFileDataset::from_tokens(
      std::vector<uint16_t>(tokens.begin() + static_cast<std::ptrdiff_t>(n_train), tokens.end()), context,
      info.num_outputs, {}, name + ", validation"));
  return d;
}

}  // namespace

LoadedData load_data(const DataSpec& spec, const RunArgs& a, const ModelInfo& info, const TextCodec* codec) {
  const ModelKind& model = find_model(a.model);
  LoadedData d;
  const int64_t context = model.is_language_model() ? info.sample_shape[0] : 0;
  // Language-model windows do not overlap (stride = context): an epoch is one pass over the text.
  const data::TextOptions train_text{.part = data::TextPart::kTrain, .stride = context};
  const data::TextOptions val_text{.part = data::TextPart::kVal, .stride = context};
  switch (spec.kind) {
    case DataSpec::Kind::kFashionMNIST:
      d.train = std::make_unique<data::FashionMNIST>(spec.path, data::Split::kTrain);
      d.eval = std::make_unique<data::FashionMNIST>(spec.path, data::Split::kTest);
      break;
    case DataSpec::Kind::kMNIST:
      d.train = std::make_unique<data::MNIST>(spec.path, data::Split::kTrain);
      d.eval = std::make_unique<data::MNIST>(spec.path, data::Split::kTest);
      break;
    case DataSpec::Kind::kText:
      if (model.reads() == Reads::kTokens) return tokenized_text(spec, a, info, codec);
      d.train = std::make_unique<data::TextDataset>(spec.path, context, train_text);
      d.eval = std::make_unique<data::TextDataset>(spec.path, context, val_text);
      break;
    case DataSpec::Kind::kTokens:
      d.train = std::make_unique<data::TokenFileDataset>(spec.path, context, info.num_outputs);
      if (!spec.val_path.empty())
        d.eval = std::make_unique<data::TokenFileDataset>(spec.val_path, context, info.num_outputs);
      break;
    case DataSpec::Kind::kSynthetic:
      return model.synthetic_data(info, spec.synthetic_size, a.trainer.seed);
  }
  return d;
}

int processes() { return dist::launched_by_mpi() ? dist::world().size() : 1; }

int64_t accumulation_steps(const RunArgs& a, int64_t process_count) {
  if (a.global_batch_size == 0) return a.trainer.accumulation_steps;
  if (a.trainer.accumulation_steps != 1)
    throw UsageError("--global-batch-size and --grad-accum both set the accumulation: give one of them");
  const int64_t per_step = a.trainer.batch_size * process_count;
  if (a.global_batch_size % per_step != 0)
    throw UsageError(mixtrain::detail::concat("--global-batch-size ", a.global_batch_size, " is not a multiple of ",
                                              "--batch-size ", a.trainer.batch_size, " x ", process_count,
                                              process_count == 1 ? " process" : " processes", " = ", per_step));
  return a.global_batch_size / per_step;
}

std::string describe_batch(const RunArgs& a, int64_t process_count) {
  const int64_t micro = accumulation_steps(a, process_count), b = a.trainer.batch_size;
  if (process_count == 1 && micro == 1) return std::to_string(b);
  std::string text = std::to_string(b);
  if (process_count > 1) text += " per process x " + std::to_string(process_count) + " processes";
  if (micro > 1) text += " x " + std::to_string(micro) + " micro-batches";
  return text + " = " + std::to_string(b * process_count * micro);
}

train::TrainerOptions trainer_options(const RunArgs& a, train::Precision precision, DType param_dtype) {
  const ModelInfo info = run_model_info(a);
  train::TrainerOptions o = a.trainer;  // the flags that are Trainer options; the rest from names below
  o.precision = {.precision = precision,
                 .scaler = train::parse_scaler_mode(a.scaler),
                 .param_dtype = param_dtype,
                 .compact_state = a.compact_state,
                 .weight_update = train::parse_weight_update(a.weight_update),
                 .rounding_seed = a.trainer.seed,
                 .fp8 = {.format = amp::parse_fp8_format(a.fp8_format),
                         .amax_history_len = a.fp8_history,
                         .margin = a.fp8_margin,
                         .amax_compute = amp::parse_amax_compute(a.fp8_amax)}};
  o.out_dir = a.out;
  o.on_nonfinite = train::parse_nonfinite_policy(a.on_nonfinite);
  o.lr_decay = a.lr_decay == "constant" ? train::LrDecay::kConstant : train::LrDecay::kCosine;
  if (a.grad_clip > 0) o.clip_grad_norm = a.grad_clip;
  o.accumulation_steps = accumulation_steps(a, processes());
  o.tensorboard = !a.no_tensorboard;
  o.fused_lm_head = !a.unfused_head;
  o.model_name = a.model;
  o.data_name = a.data;
  o.augment_name = a.augment;
  if (a.augment == "flip") o.train_transform = data::random_horizontal_flip(a.trainer.seed);
  o.flops_per_sample = info.flops_per_sample;
  // Language-model logits are [B, 128, 256]: smaller evaluation batches keep them modest.
  o.eval_batch_size = info.task == ModelTask::kLanguageModel ? 64 : 500;
  return o;
}


}  // namespace mixtrain::cli
