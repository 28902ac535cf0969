// Tokenizer::save_pretrained: Hugging Face's GPT-2 files (vocab.json, merges.txt, tokenizer_config.json,
// special_tokens_map.json), each written atomically.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mixtrain/error.h"
#include "mixtrain/io/file.h"
#include "text/byte_alphabet.h"
#include "text/tokenizer_impl.h"

namespace mixtrain::text {

void Tokenizer::save_pretrained(const std::string& dir, int64_t model_max_length) const {
  using json = nlohmann::ordered_json;
  const Impl& m = *impl_;
  MT_CHECK(model_max_length > 0, "Tokenizer::save_pretrained: model_max_length must be positive, got ", model_max_length);
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    MT_FAIL("Tokenizer::save_pretrained: cannot create ", detail::quote_untrusted(dir, 256), ": ", std::strerror(errno));

  // vocab.json: every token by id, the special tokens included (as GPT-2's lists "<|endoftext|>").
  json vocab = json::object();
  for (TokenId id = 0; id < m.id_limit; ++id) {
    if (m.bpe.has(id)) {
      vocab[to_alphabet(m.bpe.bytes(id))] = id;
    } else if (m.special_of_id[id] >= 0) {
      const std::string spelling = to_alphabet(m.specials[m.special_of_id[id]].first);
      if (!vocab.contains(spelling)) vocab[spelling] = id;
    }
  }
  // merges.txt: by rank; transformers' readers skip the first line (the version).
  std::string merges = "#version: 0.2\n";
  for (const Merge& mg : m.bpe.merges()) {
    merges += to_alphabet(m.bpe.bytes(mg.left));
    merges += ' ';
    merges += to_alphabet(m.bpe.bytes(mg.right));
    merges += '\n';
  }
  // Special tokens: <|endoftext|> as bos, eos and unk (GPT-2's), the others as additional ones.
  json added = json::object();
  std::vector<std::pair<std::string, TokenId>> specials = m.specials;
  std::sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  json additional = json::array();
  for (const auto& [text, id] : specials) {
    added[std::to_string(id)] = {{"content", text},  {"lstrip", false},  {"normalized", true},
                                 {"rstrip", false},  {"single_word", false}, {"special", true}};
    if (text != "<|endoftext|>") additional.push_back(text);
  }
  const bool eot = end_of_text().has_value();
  json config = {{"add_bos_token", false}, {"add_prefix_space", false}, {"added_tokens_decoder", added}};
  json map = json::object();
  if (eot) {
    for (const char* key : {"bos_token", "eos_token", "unk_token"}) {
      config[key] = "<|endoftext|>";
      map[key] = "<|endoftext|>";
    }
  }
  if (!additional.empty()) {
    config["additional_special_tokens"] = additional;
    map["additional_special_tokens"] = additional;
  }
  config["clean_up_tokenization_spaces"] = false;  // decode gives back the exact text
  config["errors"] = "replace";
  config["model_max_length"] = model_max_length;
  config["tokenizer_class"] = "GPT2Tokenizer";

  const std::string who = "Tokenizer::save_pretrained";
  io::write_file_atomic(dir + "/vocab.json", vocab.dump(), who);
  io::write_file_atomic(dir + "/merges.txt", merges, who);
  io::write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n", who);
  io::write_file_atomic(dir + "/special_tokens_map.json", map.dump(2) + "\n", who);
}

}  // namespace mixtrain::text
