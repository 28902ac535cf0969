// mixtrain generate: text from a trained GPT (nn::generate with a key/value cache).
#include <mixtrain/amp/autocast.h>
#include <mixtrain/data/dataset.h>
#include <mixtrain/factory.h>
#include <mixtrain/io/checkpoint.h>
#include <mixtrain/io/hf_gpt2.h>
#include <mixtrain/io/safetensors.h>
#include <mixtrain/nn/generation.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"

namespace mixtrain::cli {

namespace fs = std::filesystem;

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& g) {
  CLI::App* cmd = app.add_subcommand(
      "generate", "Continue a prompt with a trained GPT model (greedy or sampled, with a key/value cache)");
  RunArgs& a = g.run;
  cmd->add_option("--model", a.model, "Model: gpt, gpt-small (byte-level: text in, text out) or gpt2 (token ids)")
      ->check(CLI::IsMember({"gpt", "gpt-small", "gpt2"}))
      ->capture_default_str();
  cmd->add_option("--weights", g.weights,
                  "The weights: a model.safetensors or training checkpoint written by mixtrain train; for gpt2 also a "
                  "Hugging Face directory (config.json and model.safetensors), or a checkpoint with config.json beside")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--gpt2-config", a.gpt2_config,
                  "gpt2 when --weights has no config.json beside it: small, medium, large, xl or a config.json")
      ->capture_default_str();
  auto* prompt = cmd->add_option("--prompt", g.prompt, "The prompt as text (byte-level models)");
  cmd->add_option("--tokens", g.tokens, "The prompt as token ids, comma-separated (any model)")
      ->delimiter(',')
      ->excludes(prompt);
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
  cmd->add_option("--precision", a.precision, "fp32, or bf16 / fp16 (autocast: 16-bit products, fp32 softmax)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "Where the model runs: " + device_help())->capture_default_str();
  cmd->add_option("--threads", a.threads, "CPU threads (0: one per logical processor)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--json", g.json, "Print one JSON object (prompt and generated tokens, text for byte-level models)");
  return cmd;
}

namespace {

// A model.safetensors in the model's own names, or a training checkpoint, which holds the model's
// tensors under "model." beside the optimizer's (not read). Names and shapes are checked against the
// model from the header, before anything is allocated; every error is one line naming the file.
void load_weights(nn::Module& model, const std::string& path, bool checkpoint) {
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

// The model of `g` with its weights, on the CPU in fp32.
std::shared_ptr<nn::Module> load_model(const GenerateArgs& g) {
  const RunArgs& a = g.run;
  const bool dir = fs::is_directory(g.weights);
  if (dir && a.model != "gpt2")
    throw UsageError("--weights: '" + g.weights + "' is a directory; model " + a.model +
                     " takes a model.safetensors or checkpoint file");
  if (dir) {
    if (a.gpt2_config != "small") throw UsageError("--gpt2-config: the directory's config.json gives the architecture");
    return io::load_hf_gpt2(g.weights);
  }
  const bool checkpoint = io::read_safetensors_header(g.weights).metadata.contains(io::kCheckpointVersionKey);
  std::shared_ptr<nn::Module> model;
  if (a.model == "gpt2") {
    // The architecture: config.json beside the file (a gpt2 run writes it), else --gpt2-config.
    const fs::path beside = fs::path(g.weights).parent_path() / "config.json";
    RunArgs with_config = a;
    const bool guessed = a.gpt2_config == "small" && !fs::is_regular_file(beside);
    if (a.gpt2_config == "small" && !guessed) with_config.gpt2_config = beside.string();
    model = make_gpt2(run_gpt2_config(with_config), 0);
    try {
      if (!checkpoint) {  // a gpt2 model.safetensors is in Hugging Face's layout
        io::load_hf_gpt2_weights(dynamic_cast<nn::GPT2&>(*model), g.weights);
        return model;
      }
      load_weights(*model, g.weights, checkpoint);
      return model;
    } catch (const Error& e) {
      if (!guessed) throw;
      MT_FAIL(e.what(), " (there is no config.json beside the file, so the architecture was GPT-2 small's: give it ",
              "with --gpt2-config)");
    }
  }
  model = make_run_model(a);
  load_weights(*model, g.weights, checkpoint);
  return model;
}

std::vector<int64_t> prompt_tokens(const GenerateArgs& g, bool bytes) {
  if (!g.tokens.empty()) return g.tokens;
  if (!bytes) throw UsageError("model " + g.run.model + " reads token ids: give the prompt as --tokens 1,2,3");
  if (g.prompt.empty()) throw UsageError("give a prompt: --prompt TEXT (or --tokens 1,2,3)");
  return data::TextDataset::encode(g.prompt).to_vector<int64_t>();
}

}  // namespace

int run_generate(const GenerateArgs& g) {
  const RunArgs& a = g.run;
  apply_threads(a.threads);
  const Device device = parse_device(a.device);
  const bool bytes = a.model != "gpt2";
  const std::vector<int64_t> prompt = prompt_tokens(g, bytes);
  std::shared_ptr<nn::Module> model = load_model(g);
  auto* decoder = dynamic_cast<nn::IncrementalDecoder*>(model.get());
  MT_INTERNAL_ASSERT(decoder != nullptr, "model ", a.model, " does not decode incrementally");
  model->eval();
  model->to(device);

  std::optional<amp::Autocast> autocast;
  if (a.precision != "fp32") autocast.emplace(device.type, a.precision == "bf16" ? kBFloat16 : kFloat16);
  const bool stream = !g.json && bytes;  // text appears as it is made
  if (stream) {
    const std::string text = data::TextDataset::decode(from_vector(prompt));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> out = nn::generate(*decoder, prompt, g.options, device, [&](int64_t token) {
    if (!stream) return;
    std::fputc(static_cast<int>(token), stdout);
    std::fflush(stdout);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (g.json) {
    nlohmann::json j = {{"model", a.model},       {"precision", a.precision}, {"device", a.device},
                        {"prompt_tokens", prompt}, {"tokens", out},           {"temperature", g.options.temperature},
                        {"top_k", g.options.top_k}, {"seed", g.options.seed}, {"seconds", seconds}};
    if (bytes) {
      // Bytes that are not UTF-8 are replaced in the JSON text (the token ids stay exact).
      j["text"] = data::TextDataset::decode(from_vector(out));
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s\n", j.dump().c_str());
    }
  } else if (bytes) {
    std::printf("\n");
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(out[i]));
    std::printf("\n");
  }
  std::fprintf(stderr, "%zu tokens in %.2f s (%.1f tokens/s)\n", out.size(), seconds,
               seconds > 0 ? static_cast<double>(out.size()) / seconds : 0.0);
  return 0;
}

}  // namespace mixtrain::cli
