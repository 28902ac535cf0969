// Hugging Face's files: tokenizer.json, or vocab.json + merges.txt with the special tokens of
// tokenizer_config.json and special_tokens_map.json.
#include <sys/stat.h>

#include <algorithm>

#include "io/json_input.h"
#include "mixtrain/error.h"
#include "mixtrain/io/file.h"
#include "text/byte_alphabet.h"
#include "text/tokenizer_impl.h"

namespace mixtrain::text {

namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 8;
constexpr size_t kMaxMergeLine = 4 * kMaxTokenBytes + 2;  // two tokens of up to 256 two-byte characters

json read_json(const std::string& file) {
  const std::string text = io::read_file(file, kMaxFileBytes, "tokenizer");
  return io::parse_untrusted_json(text, kMaxJsonDepth, [&](uint64_t position, const std::string& what) {
    MT_FAIL(file_prefix(file), "invalid JSON at byte ", position, ": ", what);
  });
}

// field is "model.vocab" etc., for messages.
[[noreturn]] void refuse(const std::string& file, const std::string& field, const std::string& what) {
  MT_FAIL(file_prefix(file), field, ": ", what);
}

// The vocabulary: {"token in the byte alphabet": id, ...}.
void read_vocab(const std::string& file, const std::string& field, const json& vocab, Bpe& bpe) {
  if (!vocab.is_object()) refuse(file, field, "expected an object {token: id}, got " + io::describe_json(vocab));
  if (vocab.size() > kMaxTokens) refuse(file, field, detail::concat("more than ", kMaxTokens, " tokens"));
  for (const auto& [key, value] : vocab.items()) {
    const std::string where = detail::concat("token ", detail::quote_untrusted(key));
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0))
      refuse(file, field, where + ": the id " + io::describe_json(value) + " is not a non-negative integer");
    const uint64_t id = value.get<uint64_t>();
    if (id >= kMaxTokens) refuse(file, field, detail::concat(where, ": the id ", id, " is above the limit of ", kMaxTokens - 1));
    std::optional<std::string> bytes = from_alphabet(key);
    if (!bytes) refuse(file, field, where + " is not spelled in GPT-2's byte alphabet (a byte-level vocabulary)");
    if (bytes->empty() || bytes->size() > kMaxTokenBytes)
      refuse(file, field, detail::concat(where, " has ", bytes->size(), " bytes (1 to ", kMaxTokenBytes, " allowed)"));
    if (!bpe.add_token(static_cast<TokenId>(id), std::move(*bytes)))
      refuse(file, field, detail::concat(where, ": the id ", id, " is given to two tokens"));
  }
}

// One merge "a b" (both spelled in the byte alphabet) at `rank`; `where` names the line or entry.
void add_merge(const std::string& file, const std::string& where, std::string_view a, std::string_view b,
               uint32_t rank, Bpe& bpe) {
  const std::optional<std::string> x = from_alphabet(a), y = from_alphabet(b);
  const TokenId l = x ? bpe.find(*x) : kNoToken;
  const TokenId r = y ? bpe.find(*y) : kNoToken;
  MT_CHECK(l != kNoToken, file_prefix(file), where, ": the merge names ", detail::quote_untrusted(a),
           ", which is not in the vocabulary");
  MT_CHECK(r != kNoToken, file_prefix(file), where, ": the merge names ", detail::quote_untrusted(b),
           ", which is not in the vocabulary");
  const TokenId m = bpe.find(*x + *y);
  MT_CHECK(m != kNoToken, file_prefix(file), where, ": the merge's result ", detail::quote_untrusted(std::string(a) + std::string(b)),
           " is not in the vocabulary");
  MT_CHECK(bpe.add_merge(l, r, rank, m), file_prefix(file), where, ": the merge ",
           detail::quote_untrusted(std::string(a) + " " + std::string(b)), " is listed twice");
}

bool is_null_or(const json& o, const char* key, const json& allowed) {
  return !o.contains(key) || o[key].is_null() || o[key] == allowed;
}

// A tokenizer_config.json / special_tokens_map.json token: "text", {"content": "text", ...} or null.
std::optional<std::string> token_text(const std::string& file, const std::string& field, const json& v) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  refuse(file, field, "expected a token's text or {\"content\": text}, got " + io::describe_json(v));
}

// Special tokens named by a tokenizer_config.json or special_tokens_map.json.
void read_special_names(const std::string& file, const json& config, std::vector<std::string>& names,
                        std::vector<std::pair<std::string, TokenId>>& with_ids) {
  if (!config.is_object()) refuse(file, "(top level)", "expected an object");
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"})
    if (config.contains(key))
      if (auto t = token_text(file, key, config[key])) names.push_back(*t);
  if (config.contains("additional_special_tokens")) {
    const json& a = config["additional_special_tokens"];
    if (!a.is_array()) refuse(file, "additional_special_tokens", "expected an array");
    for (const json& v : a)
      if (auto t = token_text(file, "additional_special_tokens", v)) names.push_back(*t);
  }
  if (config.contains("added_tokens_decoder")) {
    const json& d = config["added_tokens_decoder"];
    if (!d.is_object()) refuse(file, "added_tokens_decoder", "expected an object {id: token}");
    for (const auto& [key, v] : d.items()) {
      const std::string field = "added_tokens_decoder." + detail::quote_untrusted(key);
      uint64_t id = 0;
      if (key.empty() || key.size() > 7 || key.find_first_not_of("0123456789") != std::string::npos)
        refuse(file, field, "the key is not a token id");
      id = std::stoull(key);
      auto t = token_text(file, field, v);
      if (!t) refuse(file, field, "no content");
      with_ids.emplace_back(*t, static_cast<TokenId>(id));
    }
  }
  if (config.contains("add_prefix_space") && config["add_prefix_space"] == true)
    refuse(file, "add_prefix_space", "true is not implemented (GPT-2 adds no prefix space)");
  if (config.contains("add_bos_token") && config["add_bos_token"] == true)
    refuse(file, "add_bos_token", "true is not implemented (encode adds no tokens)");
}

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// The pre-tokenizer: ByteLevel with GPT-2's expression, either as one ByteLevel or as a Split of the
// expression followed by ByteLevel without it.
void check_byte_level(const std::string& file, const std::string& field, const json& p, bool use_regex) {
  if (!is_null_or(p, "add_prefix_space", false))
    refuse(file, field + ".add_prefix_space", "true is not implemented (GPT-2 adds no prefix space)");
  const bool regex = !p.contains("use_regex") || p["use_regex"] == true;
  if (p.contains("use_regex") && !p["use_regex"].is_boolean()) refuse(file, field + ".use_regex", "expected true or false");
  if (regex != use_regex)
    refuse(file, field + ".use_regex",
           use_regex ? "false is not implemented (GPT-2 splits by its expression)"
                     : "true after a Split would split twice (not implemented)");
}

void check_pre_tokenizer(const std::string& file, const json& p) {
  const std::string field = "pre_tokenizer";
  if (!p.is_object() || !p.contains("type")) refuse(file, field, "expected GPT-2's ByteLevel pre-tokenizer, got " + io::describe_json(p));
  if (p["type"] == "ByteLevel") {
    check_byte_level(file, field, p, true);
    return;
  }
  if (p["type"] != "Sequence" || !p.contains("pretokenizers") || !p["pretokenizers"].is_array() ||
      p["pretokenizers"].size() != 2)
    refuse(file, field, "only ByteLevel, or a Sequence of a Split by GPT-2's expression and ByteLevel, is implemented; got " +
                            io::describe_json(p.value("type", json())));
  const json& split = p["pretokenizers"][0];
  const json& bl = p["pretokenizers"][1];
  const std::string sf = field + ".pretokenizers[0]";
  if (!split.is_object() || split.value("type", json()) != "Split")
    refuse(file, sf, "expected a Split by GPT-2's expression");
  const json pattern = split.value("pattern", json());
  const json regex = pattern.is_object() ? pattern.value("Regex", json()) : json();
  if (!regex.is_string() || (regex != std::string(kGpt2Pattern) && regex != std::string(kGpt2PatternTiktoken)))
    refuse(file, sf + ".pattern", "only GPT-2's expression is implemented, got " + io::describe_json(pattern));
  if (split.value("behavior", json()) != "Isolated") refuse(file, sf + ".behavior", "only \"Isolated\" is implemented");
  if (!is_null_or(split, "invert", false)) refuse(file, sf + ".invert", "only false is implemented");
  if (!bl.is_object() || bl.value("type", json()) != "ByteLevel")
    refuse(file, field + ".pretokenizers[1]", "expected ByteLevel");
  check_byte_level(file, field + ".pretokenizers[1]", bl, false);
}

}  // namespace

ImplPtr load_tokenizer_json(const std::string& file) {
  const json root = read_json(file);
  if (!root.is_object()) refuse(file, "(top level)", "expected an object");
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = "tokenizer.json";
  if (!is_null_or(root, "normalizer", json())) refuse(file, "normalizer", "normalizers are not implemented (GPT-2 has none)");
  if (!root.contains("pre_tokenizer")) refuse(file, "pre_tokenizer", "missing");
  check_pre_tokenizer(file, root["pre_tokenizer"]);
  if (!is_null_or(root, "truncation", json())) refuse(file, "truncation", "not implemented (must be null)");
  if (!is_null_or(root, "padding", json())) refuse(file, "padding", "not implemented (must be null)");
  for (const char* key : {"post_processor", "decoder"}) {
    if (!root.contains(key) || root[key].is_null()) continue;
    const json& v = root[key];
    // transformers 5 writes GPT-2's post-processor as a template that adds nothing to a single
    // sequence ($A alone); a template that adds tokens (a BOS, an EOS) is not implemented.
    if (std::string(key) == "post_processor" && v.is_object() && v.value("type", json()) == "TemplateProcessing") {
      const json single = v.value("single", json());
      const bool only_a = single.is_array() && single.size() == 1 && single[0].is_object() &&
                          single[0].contains("Sequence") && single[0]["Sequence"].is_object() &&
                          single[0]["Sequence"].value("id", json()) == "A";
      if (!only_a)
        refuse(file, "post_processor.single", "a template that adds tokens to a sequence is not implemented (GPT-2's "
               "is $A alone), got " + io::describe_json(single));
      continue;
    }
    if (!v.is_object() || v.value("type", json()) != "ByteLevel")
      refuse(file, key, std::string("only ByteLevel") + (std::string(key) == "post_processor" ? ", a TemplateProcessing of $A alone" : "") + " (or null) is implemented, got " + io::describe_json(v.is_object() ? v.value("type", json()) : v));
  }
  if (!root.contains("model") || !root["model"].is_object()) refuse(file, "model", "missing");
  const json& model = root["model"];
  if (model.value("type", json()) != "BPE")
    refuse(file, "model.type", "only \"BPE\" is implemented, got " + io::describe_json(model.value("type", json())));
  if (!is_null_or(model, "dropout", json())) refuse(file, "model.dropout", "BPE dropout is not implemented (must be null)");
  if (!is_null_or(model, "unk_token", json())) refuse(file, "model.unk_token", "not implemented (a byte-level BPE needs none)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!is_null_or(model, key, "")) refuse(file, std::string("model.") + key, "not implemented (must be null)");
  if (!is_null_or(model, "fuse_unk", false)) refuse(file, "model.fuse_unk", "not implemented (must be false)");
  if (!is_null_or(model, "byte_fallback", false)) refuse(file, "model.byte_fallback", "not implemented (must be false)");
  bool ignore_merges = false;
  if (model.contains("ignore_merges") && !model["ignore_merges"].is_null()) {
    if (!model["ignore_merges"].is_boolean()) refuse(file, "model.ignore_merges", "expected true or false");
    ignore_merges = model["ignore_merges"].get<bool>();
  }
  if (!model.contains("vocab")) refuse(file, "model.vocab", "missing");
  read_vocab(file, "model.vocab", model["vocab"], impl->bpe);
  if (!model.contains("merges") || !model["merges"].is_array()) refuse(file, "model.merges", "missing, or not an array");
  const json& merges = model["merges"];
  if (merges.size() > kMaxTokens) refuse(file, "model.merges", detail::concat("more than ", kMaxTokens, " merges"));
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string where = detail::concat("model.merges[", i, "]");
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        refuse(file, where, "expected \"a b\" (two tokens and one space), got " + io::describe_json(m));
      add_merge(file, where, std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1),
                static_cast<uint32_t>(i), impl->bpe);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      add_merge(file, where, m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>(),
                static_cast<uint32_t>(i), impl->bpe);
    } else {
      refuse(file, where, "expected \"a b\" or [\"a\", \"b\"], got " + io::describe_json(m));
    }
  }
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& added = root["added_tokens"];
    if (!added.is_array()) refuse(file, "added_tokens", "expected an array");
    if (added.size() > 1024) refuse(file, "added_tokens", "more than 1024 added tokens");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      const std::string where = detail::concat("added_tokens[", i, "]");
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
          !a["content"].is_string())
        refuse(file, where, "expected {\"id\": id, \"content\": text, ...}");
      for (const char* key : {"single_word", "lstrip", "rstrip"})
        if (!is_null_or(a, key, false)) refuse(file, where + "." + key, "true is not implemented");
      const uint64_t id = a["id"].get<uint64_t>();
      if (id >= kMaxTokens) refuse(file, where + ".id", detail::concat(id, " is above the limit of ", kMaxTokens - 1));
      impl->add_special(file, a["content"].get<std::string>(), static_cast<TokenId>(id));
    }
  }
  impl->finish(file, ignore_merges ? Bpe::WholePieces::kWholeToken : Bpe::WholePieces::kMerges);
  return impl;
}

ImplPtr load_vocab_merges(const std::string& dir) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->source = "vocab.json + merges.txt";
  const std::string vocab_file = dir + "/vocab.json", merges_file = dir + "/merges.txt";
  read_vocab(vocab_file, "(top level)", read_json(vocab_file), impl->bpe);
  const std::string text = io::read_file(merges_file, kMaxFileBytes, "tokenizer");
  uint32_t rank = 0;
  for_each_line(text, [&](std::string_view line, size_t line_no) {
    if (line_no == 1 && line.substr(0, 8) == "#version") return true;
    const std::string where = detail::concat("line ", line_no);
    MT_CHECK(line.size() <= kMaxMergeLine, file_prefix(merges_file), where, " is longer than ", kMaxMergeLine, " bytes");
    const size_t space = line.find(' ');
    MT_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos,
             file_prefix(merges_file), where, " is not two tokens separated by one space: ", detail::quote_untrusted(line));
    MT_CHECK(rank < kMaxTokens, file_prefix(merges_file), "more than ", kMaxTokens, " merges");
    add_merge(merges_file, where, line.substr(0, space), line.substr(space + 1), rank++, impl->bpe);
    return true;
  });
  // Special tokens: from tokenizer_config.json and special_tokens_map.json, else <|endoftext|> when
  // the vocabulary has it.
  std::vector<std::string> names;
  std::vector<std::pair<std::string, TokenId>> with_ids;
  bool any_config = false;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string f = dir + "/" + name;
    if (!is_file(f)) continue;
    any_config = true;
    read_special_names(f, read_json(f), names, with_ids);
    for (const auto& [t, id] : with_ids) impl->add_special(f, t, id);
    for (const std::string& n : names) {
      if (std::any_of(impl->specials.begin(), impl->specials.end(), [&](const auto& s) { return s.first == n; })) continue;
      const TokenId id = impl->bpe.find(n);
      MT_CHECK(id != kNoToken, file_prefix(f), "the special token ", detail::quote_untrusted(n),
               " is neither in the vocabulary nor in added_tokens_decoder");
      impl->add_special(f, n, id);
    }
    names.clear();
    with_ids.clear();
  }
  if (!any_config)
    if (const TokenId id = impl->bpe.find("<|endoftext|>"); id != kNoToken) impl->add_special(vocab_file, "<|endoftext|>", id);
  impl->finish(vocab_file, Bpe::WholePieces::kMerges);
  return impl;
}

}  // namespace mixtrain::text
