// GPT-2 in Hugging Face's layout (io/hf_gpt2.h): config.json and the weight names and layouts.
#include "mixtrain/io/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "io/json_input.h"
#include "mixtrain/autograd.h"
#include "mixtrain/error.h"
#include "mixtrain/io/file.h"

namespace mixtrain::io {

namespace fs = std::filesystem;
using json = nlohmann::json;
using mixtrain::detail::concat;
using mixtrain::detail::quote_untrusted;

namespace {

constexpr const char* kPrefix = "transformer.";
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;
constexpr int64_t kMaxWidth = int64_t{1} << 24;  // vocab_size, n_positions, n_embd, n_inner
constexpr int64_t kMaxCount = 4096;              // n_layer, n_head

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Hugging Face's Conv1D weights, stored [in, out].
bool is_conv1d_weight(std::string_view name) {
  return starts_with(name, "h.") && (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
                                     ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight"));
}

// "h.<digits>.attn.bias" / "h.<digits>.attn.masked_bias": the causal-mask buffers of older files.
bool is_mask_buffer(std::string_view name) {
  if (!starts_with(name, "h.")) return false;
  const size_t dot = name.find('.', 2);
  if (dot == std::string_view::npos || dot == 2) return false;
  for (char c : name.substr(2, dot - 2))
    if (c < '0' || c > '9') return false;
  const std::string_view rest = name.substr(dot);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& source) : j_(j), source_(source) {}

  const json* find(const char* key) {
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  int64_t integer(const char* key, int64_t fallback, int64_t lo, int64_t hi) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    MT_CHECK(v->is_number_integer() && v->get<int64_t>() >= lo && v->get<int64_t>() <= hi, source_, ": \"", key,
             "\" must be an integer in [", lo, ", ", hi, "], got ", describe_json(*v));
    return v->get<int64_t>();
  }
  double number(const char* key, double fallback, double lo, double hi) {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    MT_CHECK(v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() >= lo && v->get<double>() <= hi,
             source_, ": \"", key, "\" must be a number in [", lo, ", ", hi, "], got ", describe_json(*v));
    return v->get<double>();
  }
  // A key whose only supported value is `want` (absent: the default, which is `want`).
  void require_bool(const char* key, bool want, const char* why) {
    const json* v = find(key);
    if (v == nullptr) return;
    MT_CHECK(v->is_boolean(), source_, ": \"", key, "\" must be true or false, got ", describe_json(*v));
    MT_CHECK(v->get<bool>() == want, source_, ": \"", key, "\": ", v->get<bool>() ? "true" : "false",
             " is not supported (", why, ")");
  }
  void require_string(const char* key, std::initializer_list<const char*> allowed, const char* what) {
    const json* v = find(key);
    if (v == nullptr) return;
    bool ok = false;
    if (v->is_string())
      for (const char* a : allowed) ok = ok || v->get<std::string>() == a;
    std::string list;
    for (const char* a : allowed) list += concat(list.empty() ? "" : ", ", "\"", a, "\"");
    MT_CHECK(ok, source_, ": \"", key, "\" = ", describe_json(*v), " is not supported: mixtrain's GPT-2 has ", what,
             " (", list, ")");
  }

 private:
  const json& j_;
  const std::string& source_;
};

}  // namespace

nn::GPT2Config parse_gpt2_config(std::string_view text, const std::string& source, std::vector<std::string>* notes) {
  // Depth 3: the object, task_specific_params' objects and their values.
  const json j = parse_untrusted_json(text, 4, [&](uint64_t pos, const std::string& what) {
    MT_FAIL(source, ": not a valid config.json (", what, " at byte ", pos, ")");
  });
  MT_CHECK(j.is_object(), source, ": a config.json holds one JSON object, got ", describe_json(j));
  ConfigReader r(j, source);
  r.require_string("model_type", {"gpt2"}, "the GPT-2 architecture only");
  r.require_string("activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "GELU's tanh form");
  r.require_bool("scale_attn_weights", true, "attention scores are always scaled by 1/sqrt(head size)");
  r.require_bool("scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
  r.require_bool("add_cross_attention", false, "no cross-attention");
  r.require_bool("tie_word_embeddings", true, "the output head is the token embedding");
  nn::GPT2Config c;
  c.vocab_size = r.integer("vocab_size", c.vocab_size, 1, kMaxWidth);
  c.n_positions = r.integer("n_positions", c.n_positions, 1, kMaxWidth);
  c.n_embd = r.integer("n_embd", c.n_embd, 1, kMaxWidth);
  c.n_layer = r.integer("n_layer", c.n_layer, 0, kMaxCount);
  c.n_head = r.integer("n_head", c.n_head, 1, kMaxCount);
  if (const json* inner = r.find("n_inner"); inner != nullptr && !inner->is_null())
    c.n_inner = r.integer("n_inner", 0, 1, kMaxWidth);
  c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon, 1e-30, 1.0);
  c.embd_pdrop = r.number("embd_pdrop", c.embd_pdrop, 0.0, 0.999);
  c.resid_pdrop = r.number("resid_pdrop", c.resid_pdrop, 0.0, 0.999);
  c.attn_pdrop = r.number("attn_pdrop", c.attn_pdrop, 0.0, 0.999);
  c.initializer_range = r.number("initializer_range", c.initializer_range, 0.0, 1e3);
  MT_CHECK(c.n_embd % c.n_head == 0, source, ": \"n_embd\" (", c.n_embd, ") must be a multiple of \"n_head\" (",
           c.n_head, ")");
  // The largest tensors must count their elements in int64: V * C and C * n_inner are < 2^48 here.
  nn::validate(c);
  if (notes != nullptr && c.attn_pdrop > 0.0)
    notes->push_back(concat(source, ": attn_pdrop ", c.attn_pdrop,
                            " is not applied (mixtrain's fused attention has no dropout on the probabilities)"));
  return c;
}

nn::GPT2Config read_gpt2_config(const std::string& path, std::vector<std::string>* notes) {
  return parse_gpt2_config(read_file(path, kMaxConfigBytes, "GPT-2 config"), concat("'", path, "'"), notes);
}

std::string gpt2_config_json(const nn::GPT2Config& c, std::string_view source_json) {
  json j = json::object();
  j["activation_function"] = "gelu_new";
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["attn_pdrop"] = c.attn_pdrop;
  j["embd_pdrop"] = c.embd_pdrop;
  j["initializer_range"] = c.initializer_range;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["model_type"] = "gpt2";
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner > 0 ? json(c.n_inner) : json(nullptr);
  j["n_layer"] = c.n_layer;
  j["n_positions"] = c.n_positions;
  j["resid_pdrop"] = c.resid_pdrop;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["vocab_size"] = c.vocab_size;
  if (!source_json.empty()) {
    json merged = parse_untrusted_json(source_json, 4, [](uint64_t pos, const std::string& what) {
      MT_FAIL("gpt2_config_json: the source config.json is not valid (", what, " at byte ", pos, ")");
    });
    MT_CHECK(merged.is_object(), "gpt2_config_json: the source config.json is not an object");
    static constexpr const char* kOwn[] = {"vocab_size",  "n_positions", "n_embd",      "n_layer",
                                           "n_head",      "n_inner",     "layer_norm_epsilon", "embd_pdrop",
                                           "resid_pdrop", "attn_pdrop",  "initializer_range"};
    for (const auto& item : j.items()) {
      const std::string& key = item.key();  // a plain name: clang 14 cannot capture structured bindings
      if (!merged.contains(key) || std::any_of(std::begin(kOwn), std::end(kOwn), [&](const char* k) { return key == k; }))
        merged[key] = item.value();
    }
    j = std::move(merged);
  }
  return j.dump(2) + "\n";
}

void load_hf_gpt2_weights(nn::GPT2& model, const std::string& path) {
  const nn::StateDict state = model.state_dict();
  std::string prefix;
  // Every name, dtype and shape is checked against the model from the header, before anything is
  // allocated or read; the mask buffers of older files are not read at all.
  auto select = [&](const SafetensorsHeader& h) {
    bool prefixed = false, bare = false;
    for (const SafetensorsEntry& e : h.tensors)
      if (e.name != "lm_head.weight") (starts_with(e.name, kPrefix) ? prefixed : bare) = true;
    MT_CHECK(!(prefixed && bare), "'", path, "': some names carry the \"transformer.\" prefix and some do not");
    prefix = prefixed ? kPrefix : "";
    std::map<std::string, const SafetensorsEntry*> by_name;
    for (const SafetensorsEntry& e : h.tensors) by_name[e.name] = &e;
    for (const auto& [name, target] : state) {
      const std::string key = prefix + name;
      const auto it = by_name.find(key);
      MT_CHECK(it != by_name.end(), "'", path, "': no ", quote_untrusted(key), " (the model's ", name, ", ",
               describe(target), ")");
      const SafetensorsEntry& e = *it->second;
      MT_CHECK(is_floating(e.dtype), "'", path, "': ", quote_untrusted(key), " is ", to_string(e.dtype),
               ", expected floating point");
      const Shape want = is_conv1d_weight(name) ? Shape{target.size(1), target.size(0)} : target.shape();
      MT_CHECK(e.shape == want, "'", path, "': ", quote_untrusted(key), " has shape ", e.shape, ", the model expects ",
               want, is_conv1d_weight(name) ? " (Conv1D layout [in, out])" : "");
    }
    std::vector<bool> read(h.tensors.size(), false);
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      const std::string& name = h.tensors[i].name;
      const std::string_view bare_name = std::string_view(name).substr(starts_with(name, prefix) ? prefix.size() : 0);
      if (starts_with(name, prefix) && state.contains(std::string(bare_name))) {
        read[i] = true;
      } else if (name == "lm_head.weight") {
        // Read to compare with the embedding: it must have the embedding's shape.
        const SafetensorsEntry& wte = *by_name.at(prefix + "wte.weight");
        MT_CHECK(h.tensors[i].shape == wte.shape, "'", path, "': lm_head.weight has shape ", h.tensors[i].shape,
                 ", the token embedding ", wte.shape, ": an untied output head is not GPT-2's architecture");
        read[i] = true;
      } else {
        MT_CHECK(is_mask_buffer(bare_name), "'", path, "': unexpected tensor ", quote_untrusted(name),
                 " (not a GPT-2 parameter of this config)");
      }
    }
    return read;
  };
  const SafetensorsFile file = load_safetensors(path, select);
  const auto& in = file.tensors;
  if (const auto head = in.find("lm_head.weight"); head != in.end()) {
    const Tensor& wte = in.at(prefix + "wte.weight");
    MT_CHECK(head->second.to(kFloat32).to_vector<float>() == wte.to(kFloat32).to_vector<float>(), "'", path,
             "': lm_head.weight differs from the token embedding: an untied output head is not GPT-2's "
             "architecture");
  }
  NoGradGuard no_grad;
  for (const auto& [name, target] : state) {
    Tensor value = in.at(prefix + name);
    if (is_conv1d_weight(name)) value = value.t();
    Tensor dst = target;
    dst.copy_(value.to(dst.dtype()).to(dst.device()));
  }
}

std::shared_ptr<nn::GPT2> load_hf_gpt2(const std::string& dir, std::vector<std::string>* notes) {
  MT_CHECK(is_hf_gpt2_dir(dir), "'", dir, "' is not a Hugging Face model directory: it must hold config.json and ",
           "model.safetensors (GPT2LMHeadModel.save_pretrained writes both)");
  const nn::GPT2Config config = read_gpt2_config((fs::path(dir) / "config.json").string(), notes);
  // The weights overwrite every parameter: build with no dropout-seed or init cost worth keeping.
  Generator g(0);
  auto model = std::make_shared<nn::GPT2>(config, &g);
  load_hf_gpt2_weights(*model, (fs::path(dir) / "model.safetensors").string());
  return model;
}

void save_hf_gpt2(const nn::GPT2& model, const std::string& dir, const Metadata& metadata,
                  std::string_view source_json) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, "save_hf_gpt2: cannot create '", dir, "': ", ec.message());
  NamedTensors out;
  for (const auto& [name, t] : model.state_dict()) {
    Tensor host = t.to(kCPU);
    out.emplace_back(kPrefix + name, is_conv1d_weight(name) ? host.t().contiguous() : host);
  }
  Metadata meta = metadata;
  meta["format"] = "pt";
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, meta);
  write_file_atomic((fs::path(dir) / "config.json").string(), gpt2_config_json(model.config(), source_json),
                    "save_hf_gpt2");
}

bool is_hf_gpt2_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec) &&
         fs::is_regular_file(fs::path(dir) / "model.safetensors", ec);
}

}  // namespace mixtrain::io
