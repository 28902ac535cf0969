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
//             trainer                          run settings (checked on resume) and running statistics
//
// Doubles go through JSON with round-trip precision (nlohmann prints the shortest exact form), so the
// restored statistics and hyperparameters are the saved bits.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "mixtrain/error.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/nn/dropout.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";

// Settings that decide the numerics or the data position: a resumed run must use the same ones.
json run_settings(const TrainerOptions& o, const data::Dataset& train_data, const amp::GradScaler& scaler,
                  const optim::Optimizer& opt) {
  json settings = {{"precision", std::string(to_string(o.precision.precision))},
                   {"scaler", scaler.is_enabled()},
                   {"master_weights", std::string(short_dtype_name(o.precision.param_dtype))},
                   {"batch_size", o.batch_size},
                   {"seed", o.seed},
                   {"shuffle", o.shuffle},
                   {"drop_last", o.drop_last},
                   {"train_size", train_data.size()},
                   {"optimizer", opt.name()}};
  // Only when on, so checkpoints written before the option existed still load.
  if (o.precision.compact_state) settings["compact_state"] = true;
  return settings;
}

// The ParamState field that holds the named slot (named_tensors()'s keys).
Tensor* slot(optim::ParamState& s, const std::string& key) {
  if (key == "master") return &s.master;
  if (key == "momentum_buffer") return &s.momentum_buffer;
  if (key == "exp_avg") return &s.exp_avg;
  if (key == "exp_avg_sq") return &s.exp_avg_sq;
  if (key == "max_exp_avg_sq") return &s.max_exp_avg_sq;
  return nullptr;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

void Trainer::save_checkpoint(const std::string& path) const {
  io::Checkpoint ck;
  for (const auto& [name, t] : model_->state_dict()) ck.tensors[kModelPrefix + name] = t;

  const optim::OptimizerStateDict osd = optimizer_->state_dict();
  json steps = json::array(), groups = json::array();
  for (size_t i = 0; i < osd.state.size(); ++i) {
    steps.push_back(osd.state[i].step);
    for (const auto& [key, t] : osd.state[i].named_tensors())
      ck.tensors[kOptimPrefix + std::to_string(i) + "." + key] = t;
  }
  for (const auto& g : osd.param_groups) groups.push_back(json(g));
  ck.metadata["optim"] = json{{"type", optimizer_->name()}, {"steps", steps}, {"param_groups", groups}}.dump();

  ck.metadata["scaler"] = json(scaler_.state_dict()).dump();
  ck.metadata["rng"] = io::rng_state();
  json gens = json::object();
  for (auto& [name, m] : model_->named_modules())
    if (const auto* d = dynamic_cast<const nn::Dropout*>(m)) gens[name] = json::parse(io::rng_state(d->generator()));
  ck.metadata["generators"] = gens.dump();

  ck.set_meta_int("step", step_);
  ck.set_meta_int("epoch", epoch_);
  ck.set_meta_int("batch", batch_);
  json trainer = run_settings(options_, *train_data_, scaler_, *optimizer_);
  trainer["model"] = options_.model_name;
  trainer["skipped_steps"] = skipped_steps_;
  trainer["epoch_loss_sum"] = epoch_loss_sum_;
  trainer["epoch_loss_count"] = epoch_loss_count_;
  trainer["last_epoch_loss"] = last_epoch_loss_;
  ck.metadata["trainer"] = trainer.dump();

  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  io::save_checkpoint(path, ck);
}

void Trainer::load_checkpoint(const std::string& path) {
  io::Checkpoint ck = io::load_checkpoint(path);  // mt::Error naming the file for corrupt input
  try {
    // 1. Everything that can be checked without changing state.
    const json trainer = json::parse(ck.meta("trainer"));
    const json expected = run_settings(options_, *train_data_, scaler_, *optimizer_);
    for (const auto& [key, want] : expected.items()) {
      MT_CHECK(trainer.contains(key), "resume: '", path, "' has no trainer setting '", key, "'");
      MT_CHECK(trainer[key] == want, "resume: '", path, "' was written with ", key, " = ", trainer[key].dump(),
               ", this run has ", key, " = ", want.dump(), " (a resumed run must keep the settings that decide ",
               "its numerics and data order)");
    }
    const int64_t step = ck.meta_int("step"), epoch = ck.meta_int("epoch"), batch = ck.meta_int("batch");
    MT_CHECK(step >= 0 && epoch >= 0 && batch >= 0 && batch < loader_.size(), "resume: '", path,
             "' has an invalid position: step ", step, ", epoch ", epoch, ", batch ", batch, " (of ", loader_.size(),
             " per epoch)");

    nn::StateDict model_state;
    optim::OptimizerStateDict osd;
    osd.state.resize(optimizer_->num_parameters());
    for (const auto& [name, t] : ck.tensors) {
      if (starts_with(name, kModelPrefix)) {
        model_state.insert(name.substr(std::string(kModelPrefix).size()), t);
      } else if (starts_with(name, kOptimPrefix)) {
        const std::string rest = name.substr(std::string(kOptimPrefix).size());
        const size_t dot = rest.find('.');
        size_t index = 0, used = 0;
        bool ok = dot != std::string::npos && dot > 0;
        if (ok) {
          try {
            index = std::stoul(rest.substr(0, dot), &used);
          } catch (const std::exception&) {
            ok = false;
          }
        }
        Tensor* field =
            ok && used == dot && index < osd.state.size() ? slot(osd.state[index], rest.substr(dot + 1)) : nullptr;
        MT_CHECK(field != nullptr, "resume: '", path, "': unexpected optimizer tensor '", name,
                 "' (this optimizer has ", osd.state.size(), " parameters)");
        *field = t;
      } else {
        MT_FAIL("resume: '", path, "': unexpected tensor '", name, "'");
      }
    }
    const json optim = json::parse(ck.meta("optim"));
    const json& steps = optim.at("steps");
    MT_CHECK(steps.is_array() && steps.size() == osd.state.size(), "resume: '", path, "' has optimizer state for ",
             steps.size(), " parameters, this optimizer has ", osd.state.size());
    for (size_t i = 0; i < osd.state.size(); ++i) osd.state[i].step = steps[i].get<int64_t>();
    for (const json& g : optim.at("param_groups")) osd.param_groups.push_back(g.get<std::map<std::string, double>>());
    const auto scaler_state = json::parse(ck.meta("scaler")).get<amp::GradScalerStateDict>();
    const json gens = json::parse(ck.meta("generators"));
    for (auto& [name, m] : model_->named_modules())
      if (dynamic_cast<nn::Dropout*>(m) != nullptr)
        MT_CHECK(gens.contains(name), "resume: '", path, "' has no generator state for Dropout '", name, "'");

    // 2. Apply. Each load validates before it copies; the model's goes first because it checks the
    // most (every key, shape and dtype).
    model_->load_state_dict(model_state, /*strict=*/true);
    optimizer_->load_state_dict(osd);
    scaler_.load_state_dict(scaler_state);
    io::set_rng_state(ck.meta("rng"));
    for (auto& [name, m] : model_->named_modules())
      if (auto* d = dynamic_cast<nn::Dropout*>(m)) io::set_rng_state(gens[name].dump(), d->generator());

    step_ = step;
    epoch_ = epoch;
    batch_ = batch;
    skipped_steps_ = trainer.at("skipped_steps").get<int64_t>();
    epoch_loss_sum_ = trainer.at("epoch_loss_sum").get<double>();
    epoch_loss_count_ = trainer.at("epoch_loss_count").get<int64_t>();
    last_epoch_loss_ = trainer.at("last_epoch_loss").get<double>();
  } catch (const json::exception& e) {
    MT_FAIL("resume: '", path, "': malformed checkpoint metadata (", e.what(), ")");
  }
  fresh_ = false;
  resumed_from_ = path;
  last_eval_.reset();
  last_eval_step_ = -1;
}

}  // namespace mixtrain::train
