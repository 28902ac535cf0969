// mixtrain generate: text from a trained GPT (nn::generate with a key/value cache).
#include <mixtrain/amp/autocast.h>
#include <mixtrain/nn/generation.h>
#include <mixtrain/text/tokenizer.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "model_table.h"
#include "run_setup.h"

namespace mixtrain::cli {

namespace fs = std::filesystem;

namespace {

struct GenerateArgs {
  RunArgs run;  // model, gpt2_config, tokenizer, precision, device, threads
  std::string weights;
  std::string prompt;
  std::vector<int64_t> tokens;
  nn::GenerateOptions options;
  bool ignore_end_of_text = false;
  bool json = false;
};

CLI::App* add_generate_flags(CLI::App& app, GenerateArgs& g) {
  CLI::App* cmd = app.add_subcommand(
      "generate", "Continue a prompt with a trained GPT model (greedy or sampled, with a key/value cache)");
  RunArgs& a = g.run;
  const std::vector<std::string> models = generating_model_names();
  std::string names;
  for (const std::string& m : models) names += (names.empty() ? "" : ", ") + m;
  cmd->add_option("--model", a.model, "Model: " + names)->check(CLI::IsMember(models))->capture_default_str();
  cmd->add_option("--weights", g.weights,
                  "The weights: a model.safetensors or training checkpoint written by mixtrain train, or a run "
                  "directory; for gpt2 also a Hugging Face directory (config.json and model.safetensors), or a "
                  "checkpoint with config.json beside")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--gpt2-config", a.gpt2_config,
                  "gpt2 when --weights has no config.json beside it: small, medium, large, xl or a config.json")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a.tokenizer,
                  "gpt2: the tokenizer (a Hugging Face directory, tokenizer.json or a .tiktoken file); default: the "
                  "one in --weights' directory (a gpt2 run writes it there)");
  auto* prompt = cmd->add_option("--prompt", g.prompt, "The prompt as text");
  cmd->add_option("--tokens", g.tokens, "The prompt as token ids, comma-separated")->delimiter(',')->excludes(prompt);
  cmd->add_option("--max-new-tokens", g.options.max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", g.options.temperature,
                  "Sampling temperature; 0: greedy (always the most likely token, deterministic)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", g.options.top_k, "Sample among the K most likely tokens only (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--seed", g.options.seed, "Seed of the sampling")->capture_default_str();
  cmd->add_flag("--ignore-eot", g.ignore_end_of_text,
                "Go on after the end-of-text token (<|endoftext|>) instead of stopping there");
  cmd->add_option("--precision", a.precision, "fp32, or bf16 / fp16 (autocast: 16-bit products, fp32 softmax)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "Where the model runs: " + device_help())->capture_default_str();
  cmd->add_option("--threads", a.threads, "CPU threads (0: one per logical processor)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--json", g.json,
                "Print one JSON object: the prompt's and generated tokens, and \"text\", the continuation as text");
  return cmd;
}

// A run directory holds the weights as model.safetensors.
std::string weights_file(const ModelKind& kind, const std::string& weights) {
  std::error_code ec;
  if (!fs::is_directory(weights, ec)) return weights;
  if (kind.reads() == Reads::kTokens) return weights;  // a Hugging Face directory
  return (fs::path(weights) / "model.safetensors").string();
}

// Where the model's tokenizer is: --tokenizer, else the weights' directory.
std::unique_ptr<TextCodec> generate_codec(const ModelKind& kind, const GenerateArgs& g) {
  if (!g.run.tokenizer.empty()) return kind.codec(g.run, g.run.tokenizer, /*required=*/true);
  std::error_code ec;
  const fs::path dir = fs::is_directory(g.weights, ec) ? fs::path(g.weights) : fs::path(g.weights).parent_path();
  return kind.codec(g.run, dir.empty() ? "." : dir.string(), /*required=*/false);
}

int run_generate(const GenerateArgs& g) {
  const RunArgs& a = g.run;
  const ModelKind& kind = find_model(a.model);
  apply_threads(a.threads);
  const Device device = parse_device(a.device);
  const std::unique_ptr<TextCodec> codec = generate_codec(kind, g);
  std::vector<int64_t> prompt = g.tokens;
  if (prompt.empty()) {
    if (codec == nullptr)
      throw UsageError("model " + a.model + " has no tokenizer beside --weights '" + g.weights +
                       "': give --tokenizer DIR|FILE for a text prompt, or the prompt as --tokens 1,2,3");
    if (g.prompt.empty()) throw UsageError("give a prompt: --prompt TEXT (or --tokens 1,2,3)");
    prompt = codec->encode(g.prompt);
  }
  nn::GenerateOptions options = g.options;
  if (codec != nullptr && !g.ignore_end_of_text) options.stop_token = codec->end_of_text().value_or(-1);

  std::shared_ptr<nn::Module> model = kind.load_for_generation(a, weights_file(kind, g.weights));
  auto* decoder = dynamic_cast<nn::IncrementalDecoder*>(model.get());
  MT_INTERNAL_ASSERT(decoder != nullptr, "model ", a.model, " does not decode incrementally");
  model->eval();
  model->to(device);

  std::optional<amp::Autocast> autocast;
  if (a.precision != "fp32") autocast.emplace(device.type, a.precision == "bf16" ? kBFloat16 : kFloat16);
  // Text appears as it is made: each token's bytes as they come (a character split over two tokens
  // is whole once both are out). The stop token is not printed.
  const bool stream = !g.json && codec != nullptr;
  auto write = [](const std::string& bytes) {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  };
  if (stream) write(codec->decode(prompt));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> out = nn::generate(*decoder, prompt, options, device, [&](int64_t token) {
    if (stream && token != options.stop_token) write(codec->decode(std::span<const int64_t>(&token, 1)));
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The continuation without the token generation stopped at.
  std::span<const int64_t> continuation(out);
  if (!continuation.empty() && continuation.back() == options.stop_token && options.stop_token >= 0)
    continuation = continuation.first(continuation.size() - 1);
  if (g.json) {
    nlohmann::json j = {{"model", a.model},       {"precision", a.precision}, {"device", a.device},
                        {"prompt_tokens", prompt}, {"tokens", out},           {"temperature", g.options.temperature},
                        {"top_k", g.options.top_k}, {"seed", g.options.seed}, {"seconds", seconds}};
    if (codec != nullptr) {
      // Bytes that are not UTF-8 are replaced in the JSON text (the token ids stay exact).
      j["text"] = text::printable(codec->decode(continuation));
      j["stopped_at_end_of_text"] = continuation.size() < out.size();
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (stream) {
    std::printf("\n");
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(out[i]));
    std::printf("\n");
  }
  std::fprintf(stderr, "%zu tokens in %.2f s (%.1f tokens/s)\n", out.size(), seconds,
               seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0);
  return 0;
}

class GenerateCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_generate_flags(app, args_); }
  int run() override { return run_generate(args_); }

 private:
  GenerateArgs args_;
};

}  // namespace

std::unique_ptr<Command> make_generate_command() { return std::make_unique<GenerateCommand>(); }

}  // namespace mixtrain::cli
