// GPT-2 from a Hugging Face directory: a few bf16 fine-tuning steps on one sequence, greedy generation
// with the key/value cache, and the result saved back in Hugging Face's layout.
//
//   mixtrain_example_gpt2_finetune MODEL_DIR [OUT_DIR]
//
// MODEL_DIR holds config.json and model.safetensors (GPT2LMHeadModel.save_pretrained); OUT_DIR (default
// gpt2-finetuned) gets the same two files, which GPT2LMHeadModel.from_pretrained reads.
#include <mixtrain/mixtrain.h>

#include <iostream>

namespace mt = mixtrain;
namespace F = mt::nn::functional;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " MODEL_DIR [OUT_DIR]\n";
    return 2;
  }
  try {
    std::vector<std::string> notes;
    std::shared_ptr<mt::nn::GPT2> model = mt::io::load_hf_gpt2(argv[1], &notes);
    for (const std::string& n : notes) std::cout << "note: " << n << "\n";
    const mt::nn::GPT2Config& c = model->config();
    std::cout << "GPT-2: " << model->num_parameters() << " parameters, " << c.n_layer << " layers, vocabulary "
              << c.vocab_size << "\n";

    // One sequence of token ids to learn (a real run reads llm.c token files: mt::data::TokenFileDataset).
    const int64_t T = std::min<int64_t>(16, c.n_positions - 1);
    std::vector<int64_t> ids(static_cast<size_t>(T + 1));
    for (int64_t i = 0; i <= T; ++i) ids[i] = (3 * i + 1) % c.vocab_size;
    const mt::Tensor x = mt::from_vector(std::vector<int64_t>(ids.begin(), ids.end() - 1), {1, T});
    const mt::Tensor y = mt::from_vector(std::vector<int64_t>(ids.begin() + 1, ids.end()), {1, T});

    mt::optim::AdamW opt(model->parameters(), {.lr = 1e-3});  // the tied embedding is one parameter
    for (int step = 1; step <= 10; ++step) {
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);  // products in bf16, the loss in fp32
        loss = F::cross_entropy(model->forward(x).reshape({T, c.vocab_size}), y.reshape({T}));
      }
      loss.backward();
      opt.step();
      if (step % 5 == 0) std::cout << "step " << step << "  loss " << loss.item<float>() << "\n";
    }

    model->eval();  // no dropout while generating
    const std::vector<int64_t> out =
        mt::nn::generate(*model, {ids[0], ids[1]}, {.max_new_tokens = 8, .temperature = 0.0});
    std::cout << "greedy:";
    for (int64_t t : out) std::cout << " " << t;
    std::cout << "\n";

    const std::string out_dir = argc > 2 ? argv[2] : "gpt2-finetuned";
    mt::io::save_hf_gpt2(*model, out_dir);
    std::cout << "wrote " << out_dir << "/config.json and model.safetensors\n";
  } catch (const mt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
