// The CLI's table of models (model_table.h): image classifiers, byte-level GPTs and GPT-2 as Hugging
// Face has it. The one place that knows each model by name.
#include "model_table.h"

#include <mixtrain/data/token_file.h>
#include <mixtrain/io/checkpoint.h>
#include <mixtrain/io/file.h>
#include <mixtrain/io/hf_gpt2.h>
#include <mixtrain/io/safetensors.h>
#include <mixtrain/random.h>
#include <mixtrain/text/tokenizer.h>

#include <filesystem>
#include <functional>

namespace mixtrain::cli {

namespace fs = std::filesystem;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Flags that only GPT-2 takes, refused by the other models with the reason.
void refuse_gpt2_flags(const ModelKind& m, const RunArgs& a) {
  if (!a.init_from.empty())
    throw UsageError("--init-from loads a Hugging Face GPT-2: model " + m.name() + " does not load one");
  if (a.gpt2_config != "small") throw UsageError("--gpt2-config sets the architecture of GPT-2, not of " + m.name());
}

void refuse_embed(const ModelKind& m, const RunArgs& a) {
  if (a.embed > 0)
    throw UsageError("--embed sets the width of the gpt model; model " + m.name() + " has a fixed architecture");
}

// Text as bytes: token i is byte i (gpt, gpt-small).
class ByteCodec final : public TextCodec {
 public:
  std::vector<int64_t> encode(const std::string& text) const override {
    return data::TextDataset::encode(text).to_vector<int64_t>();
  }
  std::string decode(std::span<const int64_t> tokens) const override {
    std::string s;
    s.reserve(tokens.size());
    for (int64_t t : tokens) s += static_cast<char>(t & 0xff);
    return s;
  }
  std::optional<int64_t> end_of_text() const override { return std::nullopt; }
  std::string describe() const override { return "bytes"; }
  void save(const std::string&, int64_t) const override {}
};

// A byte-level BPE vocabulary (GPT-2's) from tokenizer files. Special tokens' text in the input
// ("<|endoftext|>") becomes the special token, as transformers' tokenizers do: a text file whose
// documents are separated by "<|endoftext|>" trains as separate documents.
class BpeCodec final : public TextCodec {
 public:
  explicit BpeCodec(text::Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}
  std::vector<int64_t> encode(const std::string& text) const override {
    const std::vector<text::TokenId> ids = tokenizer_.encode(text, text::Specials::kRecognize);
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
  // An id the tokenizer has no token for (a model's vocabulary may be larger: llm.c pads GPT-2's
  // to 50304) becomes U+FFFD: a model can generate it, and it has no bytes.
  std::string decode(std::span<const int64_t> tokens) const override {
    std::string out;
    size_t start = 0;
    for (size_t i = 0; i <= tokens.size(); ++i) {
      if (i < tokens.size() && tokens[i] >= 0 && tokens[i] < tokenizer_.vocab_size()) continue;
      out += tokenizer_.decode(tokens.subspan(start, i - start));
      if (i < tokens.size()) out += "\xEF\xBF\xBD";
      start = i + 1;
    }
    return out;
  }
  std::optional<int64_t> end_of_text() const override {
    const std::optional<text::TokenId> eot = tokenizer_.end_of_text();
    return eot ? std::optional<int64_t>(*eot) : std::nullopt;
  }
  std::string describe() const override { return tokenizer_.describe(); }
  void save(const std::string& dir, int64_t context) const override { tokenizer_.save_pretrained(dir, context); }

 private:
  text::Tokenizer tokenizer_;
};

// Whether `dir` holds the files of a Hugging Face tokenizer.
bool has_tokenizer_files(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "tokenizer.json", ec) || fs::is_regular_file(dir / "vocab.json", ec);
}

class ImageClassifier final : public ModelKind {
 public:
  ImageClassifier(ModelInfo info, std::function<std::shared_ptr<nn::Module>(uint64_t)> make)
      : ModelKind(info.name), info_(std::move(info)), make_(std::move(make)) {}
  Reads reads() const override { return Reads::kImages; }
  ModelInfo describe(const RunArgs& a) const override {
    refuse_gpt2_flags(*this, a);
    refuse_embed(*this, a);
    if (a.context != 0)
      throw UsageError("--context sets the sequence length of the gpt models; model " + name() + " classifies images");
    return info_;
  }
  std::shared_ptr<nn::Module> build(const RunArgs& a) const override { return make_(a.trainer.seed); }
  LoadedData synthetic_data(const ModelInfo& info, int64_t size, uint64_t seed) const override {
    // A held-out set drawn with another seed, a fifth of the training size.
    LoadedData d;
    d.train = std::make_unique<data::SyntheticDataset>(size, info.sample_shape, info.num_outputs, seed);
    d.eval = std::make_unique<data::SyntheticDataset>(std::max<int64_t>(1, size / 5), info.sample_shape,
                                                      info.num_outputs, seed + 1);
    return d;
  }

 private:
  ModelInfo info_;
  std::function<std::shared_ptr<nn::Module>(uint64_t)> make_;
};

// nn::GPT on bytes. `resizable`: bench --embed may change its width (scaling studies).
class ByteGPT final : public ModelKind {
 public:
  ByteGPT(std::string name, nn::GPTConfig config, bool resizable)
      : ModelKind(std::move(name)), config_(config), resizable_(resizable) {}
  Reads reads() const override { return Reads::kBytes; }

  nn::GPTConfig config(const RunArgs& a) const {
    nn::GPTConfig c = config_;
    if (a.embed > 0) {
      if (!resizable_) refuse_embed(*this, a);
      if (a.embed % c.num_heads != 0)
        throw UsageError("--embed must be a multiple of the " + std::to_string(c.num_heads) + " heads, got " +
                         std::to_string(a.embed));
      c.embed_dim = a.embed;
    }
    return c;
  }
  ModelInfo describe(const RunArgs& a) const override {
    refuse_gpt2_flags(*this, a);
    const nn::GPTConfig c = config(a);
    ModelInfo info = gpt_model_info(c);
    info.name = name();
    if (a.context == 0) return info;
    if (a.context > c.context)
      throw UsageError("--context " + std::to_string(a.context) + " is longer than model " + name() + "'s context of " +
                       std::to_string(c.context) + " tokens");
    return with_sequence_length(info, c, a.context);
  }
  std::shared_ptr<nn::Module> build(const RunArgs& a) const override { return make_gpt(config(a), a.trainer.seed); }
  int64_t embed_dim(const RunArgs& a) const override { return config(a).embed_dim; }
  std::unique_ptr<TextCodec> codec(const RunArgs& a, const std::string& source, bool required) const override {
    if (required)
      throw UsageError("--tokenizer: model " + name() + " reads bytes (its vocabulary is the 256 byte values)");
    return std::make_unique<ByteCodec>();
  }
  bool generates() const override { return true; }
  LoadedData synthetic_data(const ModelInfo& info, int64_t size, uint64_t seed) const override {
    // Enough random bytes for `size` training windows plus a 10% validation part that holds at least
    // two windows.
    const int64_t context = info.sample_shape[0];
    const data::TextOptions train_text{.part = data::TextPart::kTrain, .stride = context};
    const data::TextOptions val_text{.part = data::TextPart::kVal, .stride = context};
    const int64_t bytes = std::max((size * 10 / 9 + 2) * context + 2, 20 * (context + 1));
    const std::string text = random_text(bytes, seed);
    LoadedData d;
    d.train = std::make_unique<data::TextDataset>(data::TextDataset::from_string(text, context, train_text, "synthetic"));
    d.eval = std::make_unique<data::TextDataset>(data::TextDataset::from_string(text, context, val_text, "synthetic"));
    return d;
  }

 private:
  nn::GPTConfig config_;
  bool resizable_;
};

// nn::GPT2: GPT-2 as Hugging Face has it, its architecture from --init-from's config.json or
// --gpt2-config, saved back in transformers' layout with config.json.
class HfGPT2 final : public ModelKind {
 public:
  HfGPT2() : ModelKind("gpt2") {}
  Reads reads() const override { return Reads::kTokens; }

  // --init-from's config.json, else --gpt2-config's size or file. `notes` (may be null) receives
  // what the config asks that mixtrain will not do.
  static nn::GPT2Config config(const RunArgs& a, std::vector<std::string>* notes = nullptr) {
    if (!a.init_from.empty())
      return io::read_gpt2_config((fs::path(a.init_from) / "config.json").string(), notes);
    if (a.gpt2_config == "small") return nn::GPT2Config::small();
    if (a.gpt2_config == "medium") return nn::GPT2Config::medium();
    if (a.gpt2_config == "large") return nn::GPT2Config::large();
    if (a.gpt2_config == "xl") return nn::GPT2Config::xl();
    return io::read_gpt2_config(a.gpt2_config, notes);
  }

  ModelInfo describe(const RunArgs& a) const override {
    refuse_embed(*this, a);
    if (!a.init_from.empty() && a.gpt2_config != "small")
      throw UsageError("--gpt2-config and --init-from both give the architecture: --init-from's config.json is used, "
                       "drop --gpt2-config");
    const nn::GPT2Config c = config(a);
    ModelInfo info = gpt2_model_info(c, name());
    if (a.context == 0) return info;
    if (a.context > c.n_positions)
      throw UsageError("--context " + std::to_string(a.context) + " is longer than the model's " +
                       std::to_string(c.n_positions) + " positions");
    nn::GPT2Config shorter = c;
    shorter.n_positions = a.context;  // the FLOPs of sequences of that length
    info.sample_shape = {a.context};
    info.flops_per_sample = gpt2_model_info(shorter, name()).flops_per_sample;
    return info;
  }
  std::shared_ptr<nn::Module> build(const RunArgs& a) const override {
    if (!a.init_from.empty()) return io::load_hf_gpt2(a.init_from);
    return make_gpt2(config(a), a.trainer.seed);
  }
  std::vector<std::string> banner(const RunArgs& a) const override {
    std::vector<std::string> notes;
    const nn::GPT2Config c = config(a, &notes);
    std::vector<std::string> lines = {mixtrain::detail::concat(
        name(), " ", a.init_from.empty() ? "config " + a.gpt2_config : "from " + a.init_from, ": vocabulary ",
        c.vocab_size, ", ", c.n_positions, " positions, C ", c.n_embd, ", ", c.n_layer, " layers, ", c.n_head,
        " heads")};
    for (const std::string& n : notes) lines.push_back("note: " + n);
    return lines;
  }
  int64_t embed_dim(const RunArgs& a) const override { return config(a).n_embd; }

  SaveModel saver(const RunArgs& a) const override {
    // Weights as transformers reads them, config.json beside; every key of --init-from's config.json
    // is kept in the run's (token ids, task parameters, ...).
    const std::string source =
        a.init_from.empty() ? std::string()
                            : io::read_file((fs::path(a.init_from) / "config.json").string(), 1 << 20, "--init-from");
    return [source](const nn::Module& m, const std::string& dir, const std::map<std::string, std::string>& meta) {
      io::save_hf_gpt2(dynamic_cast<const nn::GPT2&>(m), dir, meta, source);
    };
  }
  std::vector<std::string> files() const override { return {"model.safetensors", "config.json"}; }

  std::unique_ptr<TextCodec> codec(const RunArgs& a, const std::string& source, bool required) const override {
    if (source.empty()) return nullptr;
    std::error_code ec;
    if (!required && !(fs::is_directory(source, ec) && has_tokenizer_files(source))) return nullptr;
    text::Tokenizer tokenizer = text::Tokenizer::load(source);
    const int64_t vocab = describe(a).num_outputs;
    MT_CHECK(tokenizer.vocab_size() <= vocab, "the tokenizer of '", source, "' (", tokenizer.describe(), ") has ",
             tokenizer.vocab_size(), " tokens, more than model ", name(), "'s vocabulary of ", vocab);
    return std::make_unique<BpeCodec>(std::move(tokenizer));
  }

  bool generates() const override { return true; }
  std::shared_ptr<nn::Module> load_for_generation(const RunArgs& a, const std::string& weights) const override {
    if (fs::is_directory(weights)) {
      if (a.gpt2_config != "small")
        throw UsageError("--gpt2-config: the directory's config.json gives the architecture");
      return io::load_hf_gpt2(weights);
    }
    // The architecture: config.json beside the file (a gpt2 run writes it), else --gpt2-config.
    const fs::path beside = fs::path(weights).parent_path() / "config.json";
    RunArgs with_config = a;
    const bool guessed = a.gpt2_config == "small" && !fs::is_regular_file(beside);
    if (a.gpt2_config == "small" && !guessed) with_config.gpt2_config = beside.string();
    std::shared_ptr<nn::Module> model = make_gpt2(config(with_config), 0);
    try {
      if (!io::read_safetensors_header(weights).metadata.contains(io::kCheckpointVersionKey))
        io::load_hf_gpt2_weights(dynamic_cast<nn::GPT2&>(*model), weights);  // Hugging Face's layout
      else
        load_weights(*model, weights);
      return model;
    } catch (const Error& e) {
      if (!guessed) throw;
      MT_FAIL(e.what(), " (there is no config.json beside the file, so the architecture was GPT-2 small's: give it ",
              "with --gpt2-config)");
    }
  }

  LoadedData synthetic_data(const ModelInfo& info, int64_t size, uint64_t seed) const override {
    // Uniform tokens of the vocabulary, for `size` training windows and a tenth as many for validation.
    const int64_t context = info.sample_shape[0];
    auto tokens = [&](int64_t windows, uint32_t stream) {
      std::vector<uint16_t> t(static_cast<size_t>(windows * context + 1));
      for (size_t i = 0; i < t.size(); ++i)
        t[i] = static_cast<uint16_t>(random::philox(i, seed, stream)[0] % static_cast<uint64_t>(info.num_outputs));
      return t;
    };
    LoadedData d;
    d.train = std::make_unique<data::TokenFileDataset>(
        data::TokenFileDataset::from_tokens(tokens(size, 8), context, info.num_outputs, {}, "synthetic"));
    d.eval = std::make_unique<data::TokenFileDataset>(data::TokenFileDataset::from_tokens(
        tokens(std::max<int64_t>(2, size / 10), 9), context, info.num_outputs, {}, "synthetic"));
    return d;
  }
};

}  // namespace

std::shared_ptr<nn::Module> ModelKind::load_for_generation(const RunArgs& a, const std::string& weights) const {
  if (fs::is_directory(weights))
    throw UsageError("--weights: '" + weights + "' is a directory; model " + name() +
                     " takes a model.safetensors or checkpoint file");
  std::shared_ptr<nn::Module> model = build(a);
  load_weights(*model, weights);
  return model;
}

const std::vector<const ModelKind*>& model_table() {
  static const std::vector<std::unique_ptr<ModelKind>> kinds = [] {
    std::vector<std::unique_ptr<ModelKind>> k;
    k.push_back(std::make_unique<ImageClassifier>(mlp_info("mlp", 512, 256),
                                                  [](uint64_t seed) { return make_mlp(512, 256, seed); }));
    k.push_back(std::make_unique<ImageClassifier>(mlp_info("mlp-wide", 1024, 1024),
                                                  [](uint64_t seed) { return make_mlp(1024, 1024, seed); }));
    k.push_back(std::make_unique<ImageClassifier>(cnn_info("cnn"), [](uint64_t seed) { return make_cnn(seed); }));
    k.push_back(std::make_unique<ByteGPT>("gpt", nn::GPTConfig{}, /*resizable=*/true));
    k.push_back(std::make_unique<ByteGPT>(
        "gpt-small",
        nn::GPTConfig{.vocab_size = 256, .context = 1024, .embed_dim = 768, .num_layers = 12, .num_heads = 12},
        /*resizable=*/false));
    k.push_back(std::make_unique<HfGPT2>());
    return k;
  }();
  static const std::vector<const ModelKind*> view = [] {
    std::vector<const ModelKind*> v;
    for (const auto& k : kinds) v.push_back(k.get());
    return v;
  }();
  return view;
}

const ModelKind& find_model(const std::string& name) {
  std::vector<std::string> names;
  for (const ModelKind* m : model_table()) {
    if (m->name() == name) return *m;
    names.push_back(m->name());
  }
  MT_FAIL("unknown model \"", name, "\"; valid models: ", join(names));
}

std::vector<std::string> generating_model_names() {
  std::vector<std::string> names;
  for (const ModelKind* m : model_table())
    if (m->generates()) names.push_back(m->name());
  return names;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ModelKind* m : model_table()) n.push_back(m->name());
    return n;
  }();
  return names;
}

ModelInfo model_info(const std::string& name) { return find_model(name).describe(RunArgs{}); }

std::shared_ptr<nn::Module> make_model(const std::string& name, uint64_t seed) {
  RunArgs a;
  a.trainer.seed = seed;
  return find_model(name).build(a);
}

nn::GPTConfig gpt_config(const std::string& name) {
  const auto* gpt = dynamic_cast<const ByteGPT*>(&find_model(name));
  MT_CHECK(gpt != nullptr, "gpt_config: \"", name, "\" is not a byte-level language model of the table");
  return gpt->config(RunArgs{});
}

void load_weights(nn::Module& model, const std::string& path) {
  const bool checkpoint = io::read_safetensors_header(path).metadata.contains(io::kCheckpointVersionKey);
  const std::string prefix = checkpoint ? "model." : "";
  const nn::StateDict own = model.state_dict();
  auto select = [&](const io::SafetensorsHeader& h) {
    MT_CHECK(!h.metadata.contains("zero_shard"), "--weights: '", path, "' is a shard of a ZeRO-1 checkpoint's ",
             "optimizer state, not weights: give the checkpoint file it belongs to, or the run's model.safetensors");
    std::vector<bool> read(h.tensors.size(), false);
    std::vector<std::string> unexpected;
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      const io::SafetensorsEntry& e = h.tensors[i];
      if (e.name.rfind(prefix, 0) != 0) continue;  // a checkpoint's optimizer and FP8 state
      const std::string name = e.name.substr(prefix.size());
      const Tensor* target = own.find(name);
      if (target == nullptr) {
        unexpected.push_back(name);
        continue;
      }
      MT_CHECK(e.shape == target->shape(), "--weights: '", path, "' is not a ", model.type_name(), " of this ",
               "configuration: ", mixtrain::detail::quote_untrusted(e.name), " has shape ", e.shape, ", the model's ",
               target->shape());
      read[i] = true;
    }
    if (!unexpected.empty()) {
      std::string list;
      for (size_t i = 0; i < unexpected.size() && i < 4; ++i)
        list += (i ? ", " : "") + mixtrain::detail::quote_untrusted(unexpected[i]);
      MT_FAIL("--weights: '", path, "' is not a ", model.type_name(), " of this configuration: it holds ",
              unexpected.size(), " tensors the model does not have (", list, unexpected.size() > 4 ? ", ..." : "",
              ")");
    }
    return read;
  };
  const io::SafetensorsFile file = io::load_safetensors(path, select);
  nn::StateDict dict;
  for (const auto& [name, t] : file.tensors) dict.insert(name.substr(prefix.size()), t);
  try {
    model.load_state_dict(dict);
  } catch (const Error& e) {
    MT_FAIL("--weights: '", path, "': ", e.what());
  }
}

}  // namespace mixtrain::cli
