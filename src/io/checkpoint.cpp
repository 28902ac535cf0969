// Training checkpoints on top of safetensors; RNG state as JSON.
#include "mixtrain/io/checkpoint.h"

#include <nlohmann/json.hpp>

#include "io/json_input.h"
#include "mixtrain/io/safetensors.h"

namespace mixtrain::io {

using json = nlohmann::json;

const std::string& Checkpoint::meta(const std::string& key) const {
  auto it = metadata.find(key);
  MT_CHECK(it != metadata.end(), "checkpoint: no metadata entry '", key, "'");
  return it->second;
}

int64_t Checkpoint::meta_int(const std::string& key) const {
  const std::string& s = meta(key);
  const json v = parse_untrusted_json(s, 1, [&](uint64_t, const std::string& what) {
    MT_FAIL("checkpoint: metadata '", key, "' = ", detail::quote_untrusted(s), " is not an integer (", what, ")");
  });
  MT_CHECK(v.is_number_integer(), "checkpoint: metadata '", key, "' = ", detail::quote_untrusted(s),
           " is not an integer");
  if (v.is_number_unsigned())
    MT_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "checkpoint: metadata '", key, "' = ",
             detail::quote_untrusted(s), " does not fit in int64");
  return v.get<int64_t>();
}

const Tensor& Checkpoint::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  MT_CHECK(it != tensors.end(), "checkpoint: no tensor '", name, "' (", tensors.size(), " tensors)");
  return it->second;
}

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  MT_CHECK(!checkpoint.metadata.contains(kCheckpointVersionKey), "save_checkpoint: '", path, "': metadata key '",
           kCheckpointVersionKey, "' is reserved");
  Metadata meta = checkpoint.metadata;
  meta[kCheckpointVersionKey] = std::to_string(kCheckpointVersion);
  save_safetensors(path, checkpoint.tensors, meta);
}

Checkpoint load_checkpoint(const std::string& path) { return load_checkpoint(path, nullptr); }

Checkpoint load_checkpoint(const std::string& path, const SafetensorsSelect& select) {
  // The format is checked from the header, before the caller's selection and any allocation.
  auto checked = [&](const SafetensorsHeader& h) {
    auto it = h.metadata.find(kCheckpointVersionKey);
    MT_CHECK(it != h.metadata.end(), "load_checkpoint: '", path, "' is a safetensors file but not a mixtrain ",
             "training checkpoint (no '", kCheckpointVersionKey, "' metadata); load weights-only files with ",
             "load_safetensors");
    MT_CHECK(it->second == std::to_string(kCheckpointVersion), "load_checkpoint: '", path,
             "' has checkpoint format version ", detail::quote_untrusted(it->second), "; this mixtrain reads version ",
             kCheckpointVersion);
    return select ? select(h) : std::vector<bool>(h.tensors.size(), true);
  };
  SafetensorsFile f = load_safetensors(path, checked);
  f.metadata.erase(kCheckpointVersionKey);
  return Checkpoint{std::move(f.tensors), std::move(f.metadata)};
}

std::string rng_state(const Generator& gen) {
  json j = json::object();
  j["seed"] = gen.seed();
  j["offset"] = gen.offset();
  return j.dump();
}

void set_rng_state(const std::string& state, Generator& gen) {
  const json j = parse_untrusted_json(state, 1, [&](uint64_t, const std::string& what) {
    MT_FAIL("set_rng_state: ", what, " in ", detail::quote_untrusted(state));
  });
  MT_CHECK(j.is_object() && j.size() == 2 && j.contains("seed") && j.contains("offset") &&
               j["seed"].is_number_unsigned() && j["offset"].is_number_unsigned(),
           "set_rng_state: expected {\"seed\":<uint64>,\"offset\":<uint64>}, got ", detail::quote_untrusted(state));
  gen.set_state({j["seed"].get<uint64_t>(), j["offset"].get<uint64_t>()});
}

}  // namespace mixtrain::io
