// Trainer checkpoints: the full training state in one safetensors file (io/checkpoint.h layout).
//
//   tensors   model.<state_dict name>          parameters and persistent buffers, own dtype
//             optim.<flat index>.<slot>        Optimizer::state_dict() tensors: master (always the full
//                                              fp32 master, also for packed ones), exp_avg (fp32 or
//                                              bf16), exp_avg_sq, ...
//   metadata  step, epoch, batch               position: steps done, 0-based epoch and batch of the next step
//             optim                            {"type", "steps": [per parameter], "param_groups": [{...}]}
//             scaler                           GradScaler::state_dict() ({} when disabled)
//             rng                              the default generator
//             generators                       {module name: {"seed", "offset"}} of every Dropout
//             trainer                          the trajectory settings (Trainer::trajectory_settings,
//                                              checked on resume) and the running statistics
//
// Everything read back is hostile input: the JSON is parsed with depth limits and no duplicate keys
// (io/json_input.h), values are range-checked, and nothing from the file is echoed unbounded.
// Doubles go through JSON with round-trip precision (nlohmann prints the shortest exact form), so the
// restored statistics and hyperparameters are the saved bits.
#include <algorithm>
#include <optional>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "io/json_input.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/train/trainer.h"
#include "train/nonfinite_guard.h"
#include "train/run_directory.h"

namespace mixtrain::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";
// Each module's extra state (nn::Module::extra_state: nn::Linear's FP8 scaling) as
// "fp8.<module path>.<key>". The prefix is "fp8." because FP8 scaling is the extra state there is,
// and checkpoints written before the modules kept it themselves load unchanged.
constexpr const char* kExtraPrefix = "fp8.";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The parameter index of "optim.<index>.<key>" (at most 9 digits, a non-empty key), or -1.
int64_t optim_index(const std::string& name) {
  if (!starts_with(name, kOptimPrefix)) return -1;
  const std::string rest = name.substr(std::string(kOptimPrefix).size());
  const size_t dot = rest.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 9 || dot + 1 == rest.size() ||
      !std::all_of(rest.begin(), rest.begin() + static_cast<ptrdiff_t>(dot), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(rest.substr(0, dot));
}

std::string hex64(uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kHex[v & 15];
  return s;
}

// Parses metadata entry `key` of a checkpoint (a JSON text) with at most `depth` nested levels.
json parse_meta(const io::Checkpoint& ck, const std::string& path, const char* key, int depth) {
  return io::parse_untrusted_json(ck.meta(key), depth, [&](uint64_t pos, const std::string& what) {
    MT_FAIL("resume: '", path, "': metadata '", key, "': ", what, " (at byte ", pos, " of the entry)");
  });
}

// obj[key] as an integer in [lo, hi], or an mt::Error naming the entry.
int64_t get_int(const json& obj, const char* key, int64_t lo, int64_t hi, const std::string& path, const char* what) {
  MT_CHECK(obj.is_object() && obj.contains(key), "resume: '", path, "': ", what, " has no '", key, "'");
  const json& v = obj.at(key);
  MT_CHECK(v.is_number_integer(), "resume: '", path, "': ", what, " '", key, "' is ", io::describe_json(v),
           ", not an integer");
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                           : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MT_CHECK(fits && v.get<int64_t>() >= lo, "resume: '", path, "': ", what, " '", key, "' = ", io::describe_json(v),
           " is outside [", lo, ", ", hi, "]");
  return v.get<int64_t>();
}

double get_number(const json& obj, const char* key, const std::string& path, const char* what) {
  MT_CHECK(obj.is_object() && obj.contains(key) && obj.at(key).is_number(), "resume: '", path, "': ", what, " '", key,
           "' is missing or not a number");
  return obj.at(key).get<double>();
}

}  // namespace

std::string find_latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::string best;
  int64_t best_step = -1;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool final = name == "checkpoint.safetensors";
    const bool periodic = detail::periodic_checkpoint_step(name) >= 0;
    if (!(final || periodic) || !e.is_regular_file(ec)) continue;
    const io::SafetensorsHeader h = io::read_safetensors_header(e.path().string());
    io::Checkpoint meta{{}, h.metadata};
    MT_CHECK(h.metadata.contains(io::kCheckpointVersionKey), "find_latest_checkpoint: '", e.path().string(),
             "' is not a mixtrain training checkpoint");
    const int64_t step = meta.meta_int("step");
    // The final checkpoint wins a tie: it is written after the periodic one of the same step.
    if (step > best_step || (step == best_step && final)) {
      best_step = step;
      best = e.path().string();
    }
  }
  return best;
}

const std::vector<std::string>& Trainer::fixed_settings() {
  static const std::vector<std::string> fixed = {"model",     "precision", "scaler",  "master_weights",
                                                 "compact_state", "weight_update", "optimizer", "batch_size", "shuffle",
                                                 "drop_last", "train_size", "global_batch_size"};
  return fixed;
}

uint64_t Trainer::data_fingerprint() const {
  if (!fingerprint_) fingerprint_ = train_data_->fingerprint();
  return *fingerprint_;
}

std::map<std::string, std::string> Trainer::trajectory_settings() const {
  const char* decay = options_.lr_schedule ? "custom" : options_.lr_decay == LrDecay::kCosine ? "cosine" : "constant";
  json s = {{"model", options_.model_name},
            {"precision", std::string(to_string(options_.precision.precision))},
            {"scaler", scaler_.is_enabled()},
            {"master_weights", std::string(short_dtype_name(options_.precision.param_dtype))},
            {"compact_state", options_.precision.compact_state},
            {"optimizer", optimizer_->name()},
            {"batch_size", options_.batch_size},
            {"shuffle", options_.shuffle},
            {"drop_last", options_.drop_last},
            {"train_size", train_data_->size()},
            {"seed", options_.seed},
            {"data", hex64(data_fingerprint())},
            {"augment", options_.augment_name},
            {"lr", base_lr_},
            {"lr_decay", decay},
            {"lr_min_factor", options_.lr_decay == LrDecay::kCosine ? json(options_.lr_min_factor) : json(nullptr)},
            // Only a cosine schedule depends on the length of the run; extending a run with a
            // constant (or custom, step-indexed) lr keeps its trajectory.
            {"total_steps", decay == std::string("cosine") ? json(total_steps()) : json(nullptr)},
            {"clip_grad_norm", options_.clip_grad_norm ? json(*options_.clip_grad_norm) : json(nullptr)}};
  // Only when not the default, so that checkpoints written before the setting existed still match
  // (load_checkpoint's kRecordedWhenSet lists them). Accumulation fixes which examples make a step
  // (and what the position counts): recorded as the global batch, so that a run resumed on another
  // number of processes, with the accumulation that keeps that batch, keeps its trajectory.
  if (options_.accumulation_steps != 1)
    s["global_batch_size"] = options_.batch_size * world_size() * options_.accumulation_steps;
  if (options_.warmup_steps > 0 && !options_.lr_schedule) s["warmup_steps"] = options_.warmup_steps;
  if (options_.precision.weight_update != WeightUpdate::kMaster)
    s["weight_update"] = std::string(to_string(options_.precision.weight_update));
  if (options_.precision.precision == Precision::kFp8) {
    const amp::Fp8Recipe& r = options_.precision.fp8;
    s["fp8_recipe"] = mixtrain::detail::concat("format=", amp::to_string(r.format), " history=", r.amax_history_len,
                                               " margin=", r.margin, " amax=", amp::to_string(r.amax_compute));
  }
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g)
    for (const auto& [key, value] : optimizer_->hyperparameters(g))
      if (key != "lr" && key != "initial_lr") s[g == 0 ? key : "group" + std::to_string(g) + "." + key] = value;
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : s.items()) out[key] = value.dump();
  return out;
}

int64_t Trainer::save_zero_shard(const std::string& path) const {
  dist::ProcessGroup& group = zero_->group();
  // One random token per checkpoint, recorded in the checkpoint file and in each shard: a shard left
  // by another write of the same name is recognised, not mixed in.
  int64_t token = 0;
  if (group.rank() == 0) {
    std::random_device rd;
    token = static_cast<int64_t>(((uint64_t{rd()} << 32) ^ rd()) & ((uint64_t{1} << 53) - 1));  // exact in JSON
  }
  token = group.all_gather(token)[0];
  io::Checkpoint ck;
  json pieces = json::array();
  for (const dist::ZeroStatePiece& p : zero_->local_state_pieces()) {
    pieces.push_back(json::array({p.param, p.begin, p.end, p.step}));
    for (const auto& [key, t] : p.tensors) ck.tensors[kOptimPrefix + std::to_string(p.param) + "." + key] = t;
  }
  ck.metadata["zero_shard"] = json{{"rank", group.rank()},
                                   {"world_size", group.size()},
                                   {"token", token},
                                   {"step", step_},
                                   {"total_elements", zero_->total_elements()},
                                   {"pieces", pieces}}
                                  .dump();
  // Every rank learns whether every shard is on disk before the checkpoint file is written.
  std::string error;
  try {
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    io::save_checkpoint(detail::zero_shard_path(path, group.rank(), group.size()), ck);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::vector<std::string> errors = group.all_gather(error);
  for (size_t r = 0; r < errors.size(); ++r)
    MT_CHECK(errors[r].empty(), "checkpoint '", path, "': rank ", r, " could not write its shard of the optimizer ",
             "state: ", errors[r]);
  return token;
}

void Trainer::save_checkpoint(const std::string& path) const {
  detail::check_finite_before_writing(*optimizer_, "checkpoint '" + path + "'", step_);
  // ZeRO-1: the shards first, the checkpoint file (rank 0) last, so that a checkpoint file on disk
  // always has its shards.
  const int64_t token = zero_ != nullptr ? save_zero_shard(path) : 0;
  if (rank() != 0) return;
  io::Checkpoint ck;
  for (const auto& [name, t] : model_->state_dict()) ck.tensors[kModelPrefix + name] = t;
  for (const auto& [name, m] : model_->named_modules())
    for (const auto& [key, t] : m->extra_state()) ck.tensors[kExtraPrefix + name + "." + key] = t;

  if (zero_ != nullptr) {
    std::map<std::string, double> g = optimizer_->hyperparameters(0);
    if (optimizer_->initial_lr(0)) g["initial_lr"] = *optimizer_->initial_lr(0);
    ck.metadata["optim"] = json{{"type", optimizer_->name()},
                                {"param_groups", json::array({json(g)})},
                                {"zero", {{"world_size", zero_->group().size()},
                                          {"total_elements", zero_->total_elements()},
                                          {"token", token}}}}
                               .dump();
  } else {
    const optim::OptimizerStateDict osd = optimizer_->state_dict();
    json steps = json::array(), groups = json::array();
    for (size_t i = 0; i < osd.state.size(); ++i) {
      steps.push_back(osd.state[i].step);
      for (const auto& [key, t] : osd.state[i].named_tensors())
        ck.tensors[kOptimPrefix + std::to_string(i) + "." + key] = t;
    }
    for (const auto& g : osd.param_groups) groups.push_back(json(g));
    ck.metadata["optim"] = json{{"type", optimizer_->name()}, {"steps", steps}, {"param_groups", groups}}.dump();
  }

  ck.metadata["scaler"] = json(scaler_.state_dict()).dump();
  ck.metadata["rng"] = io::rng_state();
  json gens = json::object();
  for (auto& [name, m] : model_->named_modules())
    if (const auto* d = dynamic_cast<const nn::Dropout*>(m)) gens[name] = json::parse(io::rng_state(d->generator()));
  ck.metadata["generators"] = gens.dump();

  ck.set_meta_int("step", step_);
  ck.set_meta_int("epoch", epoch_);
  ck.set_meta_int("batch", batch_);
  json trainer = json::object();
  for (const auto& [key, text] : trajectory_settings()) trainer[key] = json::parse(text);
  trainer["skipped_steps"] = skipped_steps_;
  trainer["epoch_loss_sum"] = epoch_loss_sum_;
  trainer["epoch_loss_count"] = epoch_loss_count_;
  trainer["last_epoch_loss"] = last_epoch_loss_;
  ck.metadata["trainer"] = trainer.dump();

  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  io::save_checkpoint(path, ck);
  detail::remove_stale_shards(path, zero_ != nullptr ? zero_->group().size() : 0);
}

std::vector<dist::ZeroStatePiece> Trainer::load_zero_shards(const std::string& path, int64_t step, int64_t world,
                                                            int64_t token) const {
  const int64_t total = zero_->total_elements();
  const auto [lo, hi] = zero_->owned_range(zero_->group().rank());
  const size_t num_params = optimizer_->num_parameters();
  std::vector<dist::ZeroStatePiece> pieces;
  for (int64_t q = 0; q < world; ++q) {
    // The range rank q owned when the checkpoint was written; only shards that overlap ours are read.
    const auto [begin, end] = dist::ZeroRedundancyOptimizer::range_of(total, q, world);
    if (end <= lo || begin >= hi) continue;
    const std::string shard = detail::zero_shard_path(path, static_cast<int>(q), static_cast<int>(world));
    MT_CHECK(fs::exists(shard), "resume: '", path, "' was written by ", world, " ranks under ZeRO-1, but the shard of ",
             "rank ", q, " ('", shard, "') is missing: the checkpoint is incomplete (resume from an earlier one)");
    const io::Checkpoint sc = io::load_checkpoint(shard, [&](const io::SafetensorsHeader& h) {
      const std::vector<Tensor> params = optimizer_->parameters();
      // 1-D slices of this model's parameters, checked before anything is allocated.
      for (const io::SafetensorsEntry& e : h.tensors) {
        const int64_t i = optim_index(e.name);
        MT_CHECK(i >= 0 && static_cast<size_t>(i) < num_params && e.shape.size() == 1 &&
                     e.shape[0] <= params[static_cast<size_t>(i)].numel(),
                 "resume: '", shard, "': unexpected tensor ", mixtrain::detail::quote_untrusted(e.name), " ",
                 e.shape, " (expected optim.<parameter>.<state>, 1-D slices of the ", num_params, " parameters)");
      }
      return std::vector<bool>(h.tensors.size(), true);
    });
    const json meta = parse_meta(sc, shard, "zero_shard", 3);
    MT_CHECK(meta.is_object(), "resume: '", shard, "': metadata 'zero_shard' is not an object");
    const int64_t saved_token = get_int(meta, "token", 0, std::numeric_limits<int64_t>::max(), shard, "shard");
    MT_CHECK(saved_token == token && get_int(meta, "step", 0, std::numeric_limits<int64_t>::max(), shard, "shard") == step,
             "resume: '", shard, "' belongs to another write of '", path, "' (its token or step differs): the ",
             "checkpoint is incomplete (resume from an earlier one)");
    MT_CHECK(get_int(meta, "rank", 0, world - 1, shard, "shard") == q &&
                 get_int(meta, "world_size", 1, 1 << 20, shard, "shard") == world &&
                 get_int(meta, "total_elements", 1, std::numeric_limits<int64_t>::max(), shard, "shard") == total,
             "resume: '", shard, "' is not rank ", q, "'s shard of ", world, " over ", total, " elements");
    MT_CHECK(meta.contains("pieces") && meta.at("pieces").is_array() && meta.at("pieces").size() <= num_params,
             "resume: '", shard, "': 'pieces' must be an array of at most ", num_params, " entries");
    std::map<int64_t, size_t> index_of;  // parameter -> its piece in `pieces`
    for (const json& e : meta.at("pieces")) {
      MT_CHECK(e.is_array() && e.size() == 4 && std::all_of(e.begin(), e.end(), [](const json& v) {
                 return v.is_number_integer() && v.get<int64_t>() >= 0;
               }),
               "resume: '", shard, "': a piece is ", io::describe_json(e), ", expected [param, begin, end, step]");
      dist::ZeroStatePiece p{e[0].get<int64_t>(), e[1].get<int64_t>(), e[2].get<int64_t>(), e[3].get<int64_t>(), {}};
      MT_CHECK(p.param < static_cast<int64_t>(num_params) && p.step <= step && !index_of.contains(p.param), "resume: '",
               shard, "': piece ", io::describe_json(e), " names no parameter of this model once, or a step past ",
               step);
      index_of[p.param] = pieces.size();
      pieces.push_back(std::move(p));
    }
    for (const auto& [name, t] : sc.tensors) {
      const int64_t index = optim_index(name);
      const auto it = index >= 0 ? index_of.find(index) : index_of.end();
      const std::string rest = name.substr(std::string(kOptimPrefix).size());
      const std::string key = rest.substr(rest.find('.') + 1);
      optim::ParamState probe;
      MT_CHECK(it != index_of.end() && probe.state_dict_entry(key) != nullptr, "resume: '", shard,
               "': unexpected tensor ", mixtrain::detail::quote_untrusted(name));
      pieces[it->second].tensors.emplace_back(key, t);
    }
  }
  return pieces;
}

io::SafetensorsSelect Trainer::checkpoint_selection(const std::string& path) const {
  return [this, path](const io::SafetensorsHeader& h) {
    const nn::StateDict own = model_->state_dict();
    const std::vector<Tensor> params = optimizer_->parameters();
    for (const io::SafetensorsEntry& e : h.tensors) {
      const std::string quoted = mixtrain::detail::quote_untrusted(e.name);
      if (starts_with(e.name, kModelPrefix)) {
        const Tensor* t = own.find(e.name.substr(std::string(kModelPrefix).size()));
        MT_CHECK(t == nullptr || t->shape() == e.shape, "resume: '", path, "': model tensor ", quoted, " has shape ",
                 e.shape, ", this model's is ", t->shape());  // unknown names: listed by load_state_dict
      } else if (starts_with(e.name, kOptimPrefix)) {
        const int64_t i = optim_index(e.name);
        MT_CHECK(i >= 0 && static_cast<size_t>(i) < params.size(), "resume: '", path, "': unexpected optimizer tensor ",
                 quoted, " (this optimizer has ", params.size(), " parameters)");
        MT_CHECK(e.shape == params[static_cast<size_t>(i)].shape(), "resume: '", path, "': optimizer tensor ", quoted,
                 " has shape ", e.shape, ", its parameter ", params[static_cast<size_t>(i)].shape());
      } else {
        MT_CHECK(starts_with(e.name, kExtraPrefix), "resume: '", path, "': unexpected tensor ", quoted);
        MT_CHECK(e.shape.size() <= 1 && e.shape.numel() <= 65536, "resume: '", path, "': extra-state tensor ",
                 quoted, " must have at most one dimension of at most 65536 elements, got ", e.shape);
      }
    }
    return std::vector<bool>(h.tensors.size(), true);
  };
}

void Trainer::load_checkpoint(const std::string& path) {
  // mt::Error naming the file for corrupt input, and for tensors that cannot be this run's, before
  // anything is allocated.
  io::Checkpoint ck = io::load_checkpoint(path, checkpoint_selection(path));
  try {
    // 1. Everything that can be checked without changing state.
    const json trainer = parse_meta(ck, path, "trainer", 1);
    MT_CHECK(trainer.is_object(), "resume: '", path, "': metadata 'trainer' is not an object");

    // The settings: every difference is listed; each must be named in resume_overrides and be one
    // that may change.
    const std::vector<std::string>& fixed = fixed_settings();
    const std::map<std::string, std::string> expected = trajectory_settings();
    const std::set<std::string> overrides(options_.resume_overrides.begin(), options_.resume_overrides.end());
    // Settings recorded only when not at their default: one the checkpoint has and this run lacks
    // differs too (this run has the default).
    static const std::vector<std::string> kRecordedWhenSet = {"global_batch_size", "warmup_steps", "weight_update",
                                                              "fp8_recipe"};
    const auto recorded_when_set = [](const std::string& key) {
      return std::find(kRecordedWhenSet.begin(), kRecordedWhenSet.end(), key) != kRecordedWhenSet.end();
    };
    for (const std::string& o : overrides) {
      MT_CHECK(expected.contains(o) || recorded_when_set(o), "resume: resume_overrides names '", o,
               "', which is not a setting of this run");
      MT_CHECK(std::find(fixed.begin(), fixed.end(), o) == fixed.end(), "resume: '", o,
               "' cannot be overridden: it fixes the layout of the saved state or the position in the data");
    }
    // Every setting of this run, and those recorded only when set that the checkpoint has.
    std::set<std::string> keys;
    for (const auto& [key, text] : expected) keys.insert(key);
    for (const std::string& key : kRecordedWhenSet)
      if (trainer.contains(key)) keys.insert(key);
    std::string refused, changed;
    for (const std::string& key : keys) {
      const auto mine = expected.find(key);
      const std::optional<json> want =
          mine == expected.end() ? std::nullopt : std::optional<json>(json::parse(mine->second));
      const bool has = trainer.contains(key);
      if (has && want && trainer.at(key) == *want) continue;
      const std::string what = mixtrain::detail::concat(key, " = ", has ? io::describe_json(trainer.at(key)) : "(none)",
                                                        " in the checkpoint, ", want ? io::describe_json(*want) : "(none)",
                                                        " in this run");
      std::string& list = overrides.contains(key) ? changed : refused;
      list += (list.empty() ? "" : "; ") + what;
    }
    MT_CHECK(refused.empty(), "resume: '", path, "' was written by a run with other settings: ", refused,
             ". A resumed run keeps every setting that shapes its trajectory: repeat the original ones, or name ",
             "the ones to change in resume_overrides (the CLI's --resume-override NAME,...); ",
             "model, precision, scaler, master_weights, compact_state, weight_update, optimizer, batch_size, shuffle, ",
             "drop_last, ",
             "train_size and global_batch_size cannot change");

    const int64_t per_epoch = batches_per_epoch();
    const int64_t step = ck.meta_int("step"), epoch = ck.meta_int("epoch"), batch = ck.meta_int("batch");
    MT_CHECK(step >= 0 && epoch >= 0 && batch >= 0 && batch < per_epoch && epoch <= step / per_epoch &&
                 step == epoch * per_epoch + batch,
             "resume: '", path, "' has an invalid position: step ", step, ", epoch ", epoch, ", batch ", batch, " (",
             per_epoch, " batches per epoch: step must be epoch * ", per_epoch, " + batch)");
    MT_CHECK(step <= total_steps(), "resume: '", path, "' is at step ", step, ", past the ", total_steps(),
             " steps of this run: raise the number of epochs (--epochs) or steps (--steps)");
    const int64_t skipped = get_int(trainer, "skipped_steps", 0, step, path, "trainer statistic");
    const int64_t loss_count = get_int(trainer, "epoch_loss_count", 0, batch, path, "trainer statistic");
    const double loss_sum = get_number(trainer, "epoch_loss_sum", path, "trainer statistic");
    const double last_loss = get_number(trainer, "last_epoch_loss", path, "trainer statistic");

    // Every parameter and persistent buffer, named by its tensor (load_state_dict checks the rest).
    for (const auto& [name, t] : model_->state_dict())
      MT_CHECK(ck.tensors.contains(kModelPrefix + name), "resume: '", path, "': tensor '", kModelPrefix, name,
               "' is missing (the model's ", name, ", ", describe(t), ")");
    nn::StateDict model_state;
    // Extra state by module path (each module validates its own below).
    std::map<std::string, nn::Module*> modules;
    for (auto& [name, m] : model_->named_modules()) modules[name] = m;
    std::map<std::string, nn::StateDict> extra;
    optim::OptimizerStateDict osd;
    osd.state.resize(optimizer_->num_parameters());
    for (const auto& [name, t] : ck.tensors) {
      if (starts_with(name, kModelPrefix)) {
        model_state.insert(name.substr(std::string(kModelPrefix).size()), t);
      } else if (starts_with(name, kOptimPrefix)) {
        const int64_t index = optim_index(name);
        const std::string rest = name.substr(std::string(kOptimPrefix).size());
        Tensor* field = index >= 0 && static_cast<size_t>(index) < osd.state.size()
                            ? osd.state[static_cast<size_t>(index)].state_dict_entry(rest.substr(rest.find('.') + 1))
                            : nullptr;
        MT_CHECK(field != nullptr, "resume: '", path, "': unexpected optimizer tensor ",
                 mixtrain::detail::quote_untrusted(name), " (this optimizer has ", osd.state.size(), " parameters)");
        *field = t;
      } else if (starts_with(name, kExtraPrefix)) {
        // "<module path>.<key>": the module whose path is the longest prefix (paths and keys hold dots).
        const std::string rest = name.substr(std::string(kExtraPrefix).size());
        const std::string* owner = nullptr;
        for (const auto& [path_of_module, m] : modules)
          if (rest.size() > path_of_module.size() + 1 && rest.compare(0, path_of_module.size(), path_of_module) == 0 &&
              rest[path_of_module.size()] == '.' && (owner == nullptr || path_of_module.size() > owner->size()))
            owner = &path_of_module;
        MT_CHECK(owner != nullptr, "resume: '", path, "': unexpected extra-state tensor ",
                 mixtrain::detail::quote_untrusted(name), " (no module of this model has that path)");
        extra[*owner].insert(rest.substr(owner->size() + 1), t);
      } else {
        MT_FAIL("resume: '", path, "': unexpected tensor ", mixtrain::detail::quote_untrusted(name));
      }
    }
    // Extra state is exact or refused like the rest: each module checks its own whole (after a step
    // under FP8 every FP8 layer must find all of its state), before anything is applied.
    const bool after_fp8_steps = options_.precision.precision == Precision::kFp8 && step > 0;
    auto extra_of = [&](const std::string& module) {
      const auto it = extra.find(module);
      return it == extra.end() ? nn::StateDict() : it->second;
    };
    for (const auto& [module, m] : modules) {
      try {
        m->check_extra_state(extra_of(module), after_fp8_steps, kExtraPrefix + module + ".");
      } catch (const Error& e) {
        MT_FAIL("resume: '", path, "': extra state of '", module, "': ", e.what());
      }
    }
    const json optim = parse_meta(ck, path, "optim", 3);
    MT_CHECK(optim.is_object() && optim.contains("type") && optim.at("type") == json(optimizer_->name()), "resume: '",
             path, "': the optimizer state is not ", optimizer_->name(), "'s");
    // ZeRO-1 checkpoints keep the optimizer state in shards beside the file, any number of them.
    const bool sharded = optim.contains("zero");
    std::vector<dist::ZeroStatePiece> pieces;
    int64_t sharded_world = 0;
    if (sharded) {
      const json& z = optim.at("zero");
      const int64_t world = get_int(z, "world_size", 1, 1 << 20, path, "ZeRO-1 layout");
      sharded_world = world;
      MT_CHECK(zero_ != nullptr, "resume: '", path, "' holds optimizer state sharded over ", world,
               " ranks (ZeRO-1): resume it with zero_stage 1 (--zero 1), on any number of ranks");
      const int64_t total = get_int(z, "total_elements", 1, std::numeric_limits<int64_t>::max(), path, "ZeRO-1 layout");
      MT_CHECK(total == zero_->total_elements(), "resume: '", path, "' shards ", total, " parameter elements, this ",
               "model has ", zero_->total_elements());
      const int64_t token = get_int(z, "token", 0, std::numeric_limits<int64_t>::max(), path, "ZeRO-1 layout");
      MT_CHECK(std::none_of(ck.tensors.begin(), ck.tensors.end(),
                            [](const auto& kv) { return starts_with(kv.first, kOptimPrefix); }),
               "resume: '", path, "' holds optimizer tensors beside its ZeRO-1 shards");
      pieces = load_zero_shards(path, step, world, token);
    } else {
      MT_CHECK(optim.contains("steps") && optim.at("steps").is_array() && optim.at("steps").size() == osd.state.size(),
               "resume: '", path, "' has optimizer steps for ",
               optim.contains("steps") ? io::describe_json(optim.at("steps")) : std::string("nothing"), ", this ",
               "optimizer has ", osd.state.size(), " parameters");
      for (size_t i = 0; i < osd.state.size(); ++i) {
        const json& s = optim.at("steps")[i];
        MT_CHECK(s.is_number_integer() && s.get<int64_t>() >= 0 && s.get<int64_t>() <= step, "resume: '", path,
                 "': optimizer step of parameter ", i, " is ", io::describe_json(s), ", outside [0, ", step, "]");
        osd.state[i].step = s.get<int64_t>();
        // Named here by its tensor; Optimizer::load_state_dict refuses it as well (and extra state).
        std::vector<std::string> required = osd.state[i].step > 0 ? optimizer_->stepped_state_keys(i)
                                                                   : std::vector<std::string>();
        const optim::ParamState& now = optimizer_->state(i);
        if (now.master.defined() || now.master_low.defined()) required.emplace_back("master");
        for (const std::string& key : required) {
          const std::string tensor = kOptimPrefix + std::to_string(i) + "." + key;
          MT_CHECK(ck.tensors.contains(tensor), "resume: '", path, "': tensor '", tensor, "' is missing: ",
                   optimizer_->param_name(i), " has taken ", osd.state[i].step, " steps and ", optimizer_->name(),
                   " keeps '", key, "' for it (a fresh one would silently change the trajectory)");
        }
      }
    }
    MT_CHECK(optim.contains("param_groups") && optim.at("param_groups").is_array() &&
                 optim.at("param_groups").size() == optimizer_->num_param_groups(),
             "resume: '", path, "': the optimizer state does not hold ", optimizer_->num_param_groups(),
             " parameter groups");
    // Group hyperparameters: the settings above equal this run's (or are overridden by it), and the lr
    // follows the schedule, so this run's values are the right ones; the file's are only checked.
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
      const json& jg = optim.at("param_groups")[g];
      MT_CHECK(jg.is_object(), "resume: '", path, "': parameter group ", g, " is not an object");
      std::map<std::string, double> values = optimizer_->hyperparameters(g);
      const double lr = get_number(jg, "lr", path, "parameter group");
      MT_CHECK(std::isfinite(lr) && lr >= 0, "resume: '", path, "': parameter group ", g, " has lr ", lr);
      values["lr"] = lr;
      if (jg.contains("initial_lr")) values["initial_lr"] = get_number(jg, "initial_lr", path, "parameter group");
      osd.param_groups.push_back(std::move(values));
    }
    const json scaler_json = parse_meta(ck, path, "scaler", 1);
    MT_CHECK(scaler_json.is_object(), "resume: '", path, "': metadata 'scaler' is not an object");
    amp::GradScalerStateDict scaler_state;
    for (const auto& [key, value] : scaler_json.items()) scaler_state[key] = get_number(scaler_json, key.c_str(), path, "scaler");
    const json gens = parse_meta(ck, path, "generators", 2);
    MT_CHECK(gens.is_object(), "resume: '", path, "': metadata 'generators' is not an object");
    for (auto& [name, m] : model_->named_modules())
      if (dynamic_cast<nn::Dropout*>(m) != nullptr)
        MT_CHECK(gens.contains(name), "resume: '", path, "' has no generator state for Dropout '", name, "'");

    // 2. Apply. Each load validates before it copies; the model's goes first because it checks the
    // most (every key, shape and dtype).
    // The loads below name what is wrong but not the file: say which file it came from.
    const std::string in_file = "'" + path + "'";
    auto from_file = [&](const std::string& where, const auto& load) {
      try {
        load();
      } catch (const Error& e) {
        MT_FAIL("resume: ", where, ": ", e.what());
      }
    };
    from_file(in_file, [&] { model_->load_state_dict(model_state, /*strict=*/true); });
    for (auto& [module, m] : modules) m->load_extra_state(extra_of(module), after_fp8_steps);  // checked above
    if (sharded) {
      // validates them all before it changes anything
      from_file(in_file + " (its " + std::to_string(sharded_world) + " ZeRO-1 shards)",
                [&] { zero_->load_state_pieces(pieces); });
      optimizer_->set_hyperparameters(0, osd.param_groups[0]);
      const auto it = osd.param_groups[0].find("initial_lr");
      if (it != osd.param_groups[0].end()) optimizer_->set_initial_lr(0, it->second);
    } else {
      from_file(in_file, [&] { optimizer_->load_state_dict(osd); });
    }
    from_file(in_file, [&] { scaler_.load_state_dict(scaler_state); });
    io::set_rng_state(ck.meta("rng"));
    for (auto& [name, m] : model_->named_modules())
      if (auto* d = dynamic_cast<nn::Dropout*>(m)) io::set_rng_state(gens[name].dump(), d->generator());
    // A constant schedule has nothing to recompute the lr from each step: set it (an overridden lr
    // takes effect here; otherwise it is the saved value again).
    if (!options_.lr_schedule && options_.lr_decay == LrDecay::kConstant) optimizer_->set_lr(base_lr_);

    step_ = step;
    epoch_ = epoch;
    batch_ = batch;
    skipped_steps_ = skipped;
    epoch_loss_sum_ = loss_sum;
    epoch_loss_count_ = loss_count;
    last_epoch_loss_ = last_loss;
    applied_overrides_ = changed;
  } catch (const json::exception& e) {
    MT_FAIL("resume: '", path, "': malformed checkpoint metadata (", e.what(), ")");
  }
  fresh_ = false;
  resumed_from_ = path;
  last_eval_.reset();
  last_eval_step_ = -1;
}

}  // namespace mixtrain::train
