// The CLI's table of models: each named model is a descriptor that says what it needs -- how it is
// built for a run, what data it reads, how its tokens map to text, how it is saved and loaded back,
// whether it generates. The commands ask the descriptor and never name a model; a new model is one
// entry of model_table.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli_common.h"
#include "models.h"

namespace mixtrain::cli {

// What a model reads.
enum class Reads {
  kImages,  // 28x28 images: fashion-mnist, mnist, synthetic
  kBytes,   // text as bytes (vocabulary 256): text:FILE, synthetic
  kTokens,  // token ids of a BPE vocabulary: tokens:TRAIN[,VAL], text:FILE (with the model's tokenizer), synthetic
};

// How a language model's token ids map to text and back.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // The exact bytes of the tokens (possibly not UTF-8: a token can end inside a character).
  virtual std::string decode(std::span<const int64_t> tokens) const = 0;
  // The token that separates documents (<|endoftext|>), if the vocabulary has one.
  virtual std::optional<int64_t> end_of_text() const = 0;
  // "bytes" or "byte-level BPE, 50257 tokens (DIR/tokenizer.json)".
  virtual std::string describe() const = 0;
  // Writes the files another program needs to read the tokens of this codec into `dir` (the
  // tokenizer files of a BPE vocabulary); nothing for bytes.
  virtual void save(const std::string& dir, int64_t context) const = 0;
};

class ModelKind {
 public:
  explicit ModelKind(std::string name) : name_(std::move(name)) {}
  virtual ~ModelKind() = default;
  const std::string& name() const { return name_; }

  virtual Reads reads() const = 0;
  bool is_language_model() const { return reads() != Reads::kImages; }

  // The model of a run, described: parameters, FLOPs and the sample shape of --context. Throws
  // UsageError for a flag this model does not take (--init-from, --gpt2-config, --context, --embed).
  virtual ModelInfo describe(const RunArgs& a) const = 0;
  // The model of a run on the CPU: initialised from --seed, or loaded from --init-from.
  virtual std::shared_ptr<nn::Module> build(const RunArgs& a) const = 0;
  // Lines the train banner adds about the model (its configuration and what it will not do).
  virtual std::vector<std::string> banner(const RunArgs& a) const { return {}; }
  // The embedding width of a transformer (bench's JSON "embed"), 0 for the others.
  virtual int64_t embed_dim(const RunArgs& a) const { return 0; }

  // How a run saves the trained model: empty for the Trainer's model.safetensors in the model's own
  // names; files() names what the run directory then holds besides metrics, summary and checkpoints.
  using SaveModel = decltype(train::TrainerOptions::save_model);
  virtual SaveModel saver(const RunArgs& a) const { return {}; }
  virtual std::vector<std::string> files() const { return {"model.safetensors"}; }

  // The tokens of text for this model; null for image models, and for a model of BPE tokens when
  // `source` holds no tokenizer. `source` is where its tokenizer is: --tokenizer (`required`: a
  // directory without tokenizer files is an error then), else --init-from's or the weights'
  // directory ("": none). mt::Error for tokenizer files that are there but unreadable, or whose
  // vocabulary is larger than the model's.
  virtual std::unique_ptr<TextCodec> codec(const RunArgs& a, const std::string& source, bool required) const {
    return nullptr;
  }

  // Whether `generate` can continue a prompt with it (a key/value cache decoder), and the model with
  // the weights of `weights` (a file, or a directory for models that have one), on the CPU in fp32.
  virtual bool generates() const { return false; }
  virtual std::shared_ptr<nn::Module> load_for_generation(const RunArgs& a, const std::string& weights) const;

  // Synthetic data of this model's kind: `size` training examples and a held-out set.
  virtual LoadedData synthetic_data(const ModelInfo& info, int64_t size, uint64_t seed) const = 0;

 private:
  std::string name_;
};

// Every model, in the order --help lists them.
const std::vector<const ModelKind*>& model_table();
// The model named `name`; throws mt::Error listing the valid names.
const ModelKind& find_model(const std::string& name);
// The names of the models that generate() (for generate --model).
std::vector<std::string> generating_model_names();

// A model.safetensors in the model's own names, or a training checkpoint (the model's tensors under
// "model."), loaded into `model` with names and shapes checked from the header first.
void load_weights(nn::Module& model, const std::string& path);

}  // namespace mixtrain::cli
