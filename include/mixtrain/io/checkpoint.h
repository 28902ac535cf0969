// mixtrain/io/checkpoint.h: training checkpoints, a generic container stored as a standard
// safetensors file (so any safetensors tool can open one).
//
// Conventions (the Trainer fills and reads them; this layer does not interpret them):
//   tensors   "model.<state_dict name>"      model weights, in their own dtype
//             "optim.<param>.<slot>"         optimizer state (fp32 moments, master weights)
//   metadata  "step", "epoch"                JSON integers, e.g. "1200"
//             "scaler", "rng", "optim"       JSON objects (GradScaler state, rng_state(), hyper-parameters)
// One more metadata key, "mixtrain.checkpoint" (the format version, "1"), is added by
// save_checkpoint, checked by load_checkpoint and not returned: it tells a training checkpoint from
// a weights-only file.
//
// Saving is atomic (io/file.h: temporary file, fsync, rename): a crash or error while saving leaves the
// previous checkpoint at `path` intact.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "mixtrain/io/safetensors.h"
#include "mixtrain/random.h"
#include "mixtrain/tensor.h"

namespace mixtrain::io {

inline constexpr const char* kCheckpointVersionKey = "mixtrain.checkpoint";
inline constexpr int kCheckpointVersion = 1;

struct Checkpoint {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;

  // metadata[key], or an mt::Error naming the missing key.
  const std::string& meta(const std::string& key) const;
  // metadata[key] parsed as a JSON integer (the whole string must be one), or an mt::Error.
  int64_t meta_int(const std::string& key) const;
  void set_meta_int(const std::string& key, int64_t value) { metadata[key] = std::to_string(value); }
  // tensors[name], or an mt::Error naming the missing tensor.
  const Tensor& tensor(const std::string& name) const;
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint load_checkpoint(const std::string& path);
// The same, reading only the tensors `select` picks from the header (load_safetensors' select: it
// refuses a file whose names or shapes are not the loader's before anything is allocated).
Checkpoint load_checkpoint(const std::string& path, const SafetensorsSelect& select);

// The state of a generator (the default one unless given) as JSON {"seed":S,"offset":O}, and back.
// set_rng_state validates the JSON and throws mt::Error on anything else.
std::string rng_state(const Generator& gen = default_generator());
void set_rng_state(const std::string& state, Generator& gen = default_generator());

}  // namespace mixtrain::io
