// What a run reports: the metrics.jsonl line and on_step call of each step, the summary fit() returns
// (and writes as summary.json), and the step-time and memory figures the summary is made from.
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixtrain/cpu.h"
#include "mixtrain/parallel.h"
#include "train/run_state.h"

namespace mixtrain::train {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// summary.json's peak_breakdown: bytes by category (memory::to_string's keys), the running ops'
// temporaries, the allocator's cache, and the op, module and phase at the peak.
json breakdown_json(const memory::Breakdown& b) {
  json j = json::object();
  j["total_bytes"] = b.total_bytes;
  for (int c = 0; c < memory::kNumCategories; ++c)
    j[std::string(memory::to_string(static_cast<memory::Category>(c)))] = b.bytes[static_cast<size_t>(c)];
  j["op_temporaries"] = b.op_temporary_bytes;
  j["allocator_cache"] = b.cached_bytes;
  j["op"] = b.op;
  j["module"] = b.module;
  j["phase"] = std::string(memory::phase_name(b.phase));
  return j;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + mid)) / 2;
}

int64_t tensor_bytes(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts)
    if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

}  // namespace

std::vector<std::pair<std::string, double>> detail::step_scalars(const StepInfo& info) {
  std::vector<std::pair<std::string, double>> v = {{"loss", info.loss}, {"lr", info.lr}, {"scale", info.scale}};
  v.emplace_back("step_ms", info.step_ms);
  if (info.grad_norm) v.emplace_back("grad_norm", *info.grad_norm);  // with clipping: the norm before it
  v.emplace_back("skipped_total", static_cast<double>(info.skipped_total));
  const double per_s = info.step_ms > 0 ? 1000.0 / info.step_ms : 0.0;
  v.emplace_back("samples_per_s", static_cast<double>(info.samples) * per_s);
  if (info.targets > info.samples) v.emplace_back("tokens_per_s", static_cast<double>(info.targets) * per_s);
  v.emplace_back("peak_mib", static_cast<double>(info.peak_bytes) / (1024.0 * 1024.0));
  if (info.eval) {
    v.emplace_back("eval_loss", info.eval->loss);
    if (info.eval->per_token()) v.emplace_back("eval_perplexity", info.eval->perplexity());
    if (info.eval->accuracy) v.emplace_back("eval_accuracy", *info.eval->accuracy);
  }
  return v;
}

std::string detail::tensorboard_tag(const std::string& key) {
  if (key.starts_with("eval_")) return "eval/" + key.substr(5);
  if (key == "scale") return "train/loss_scale";
  if (key == "skipped_total") return "train/skipped_steps";
  return "train/" + key;
}

void detail::add_eval(nlohmann::json& j, const EvalResult& r, const std::string& prefix) {
  j[prefix + "loss"] = r.loss;
  if (r.per_token()) j[prefix + "perplexity"] = r.perplexity();
  if (r.accuracy) j[prefix + "accuracy"] = *r.accuracy;
}

int64_t detail::training_state_bytes(const nn::Module& model, const optim::Optimizer& optimizer) {
  return tensor_bytes(model.parameters()) + tensor_bytes(model.buffers()) + optimizer.state_bytes().total() + [&] {
    int64_t g = 0;
    for (const Tensor& p : model.parameters())
      if (p.grad().defined()) g += static_cast<int64_t>(p.grad().nbytes());
    return g;
  }();
}

std::string TrainSummary::to_json(int indent) const {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json evals_json = json::array();
  for (const Eval& e : evals) {
    json j = {{"step", e.step}};
    detail::add_eval(j, e.result, "");
    evals_json.push_back(j);
  }
  json j = {{"model", model},
            {"data", data},
            {"augment", augment},
            {"precision", precision},
            {"scaler", scaler},
            {"master_weights", master_weights},
            {"compact_state", compact_state},
            {"weight_update", weight_update},
            {"epochs", epochs},
            {"steps", steps},
            {"steps_this_run", steps_this_run},
            {"batch_size", batch_size},
            {"world_size", world_size},
            {"zero_stage", zero_stage},
            {"gradient_reduction", gradient_reduction},
            {"accumulation_steps", accumulation_steps},
            {"global_batch_size", global_batch_size},
            {"fused_lm_head", fused_lm_head},
            {"test_accuracy", opt(test_accuracy)},
            {"test_loss", opt(test_loss)},
            {"evals", evals_json},
            {"final_loss", final_loss},
            {"step_ms_median", step_ms_median},
            {"samples_per_sec", samples_per_sec},
            {"gflops", opt(gflops)},
            {"peak_bytes", peak_bytes},
            {"peak_breakdown", breakdown_json(peak_breakdown)},
            {"skipped_steps", skipped_steps},
            {"final_scale", final_scale},
            {"threads", threads},
            {"cpu", cpu},
            {"isa", isa},
            {"products", products},
            {"train_seconds", train_seconds},
            {"num_parameters", num_parameters},
            {"model_state_bytes", model_state_bytes},
            {"model_state_bytes_per_param", model_state_bytes_per_param},
            {"optimizer_state_bytes", optimizer_state_bytes},
            {"seed", seed},
            {"lr", lr},
            {"lr_decay", lr_decay},
            {"lr_min_factor", lr_decay == "cosine" ? json(lr_min_factor) : json(nullptr)},
            {"warmup_steps", warmup_steps},
            {"resumed_from", resumed_from.empty() ? json(nullptr) : json(resumed_from)}};
  return j.dump(indent);
}

void Trainer::log_step(RunState& run, const StepInfo& info) {
  const bool due = info.step % options_.log_every == 0 || info.step == run.total || !info.nonfinite_origin.empty();
  if (run.metrics.is_open() && due) {
    const std::vector<std::pair<std::string, double>> values = detail::step_scalars(info);
    json j = {{"step", info.step}, {"epoch", info.epoch}, {"skipped", info.skipped}};
    for (const auto& [key, value] : values) j[key] = value;
    if (!info.nonfinite_origin.empty()) j["nonfinite_origin"] = info.nonfinite_origin;
    run.metrics.write_line(j.dump());  // one checked write per line: a crash keeps every line so far
    if (run.events) {
      std::vector<std::pair<std::string, double>> scalars;
      for (const auto& [key, value] : values) scalars.emplace_back(detail::tensorboard_tag(key), value);
      run.events->add_scalars(info.step, scalars);
    }
  }
  if (options_.on_step) options_.on_step(info);
}

TrainSummary Trainer::make_summary(const RunState& run) const {
  TrainSummary s;
  s.model = options_.model_name;
  s.data = options_.data_name;
  s.augment = options_.augment_name;
  s.lr_decay = options_.lr_schedule ? "custom" : options_.lr_decay == LrDecay::kCosine ? "cosine" : "constant";
  s.lr_min_factor = options_.lr_min_factor;
  s.warmup_steps = options_.lr_schedule ? 0 : options_.warmup_steps;
  s.precision = std::string(to_string(options_.precision.precision));
  s.scaler = scaler_.is_enabled();
  s.master_weights = std::string(short_dtype_name(options_.precision.param_dtype));
  s.compact_state = options_.precision.compact_state;
  s.weight_update = std::string(to_string(options_.precision.weight_update));
  s.epochs = static_cast<double>(step_) / static_cast<double>(batches_per_epoch());
  s.steps = step_;
  s.steps_this_run = run.steps;
  s.batch_size = options_.batch_size;
  s.world_size = world_size();
  s.zero_stage = zero_ != nullptr ? 1 : 0;
  if (ddp_) {
    const Device device = model_device();
    s.gradient_reduction =
        ddp_->reduction_path() == dist::ReductionPath::kDeviceCollectives ? ddp_->reduction_backend() + ", in device memory"
        : device.is_cpu() ? ddp_->reduction_backend()
                          : mixtrain::detail::concat(ddp_->reduction_backend(), ", host-staged from ", device);
  }
  s.accumulation_steps = options_.accumulation_steps;
  s.global_batch_size = options_.batch_size * world_size() * options_.accumulation_steps;
  s.fused_lm_head = fused_head_model() != nullptr;
  if (last_eval_) {
    s.test_accuracy = last_eval_->accuracy;
    s.test_loss = last_eval_->loss;
  }
  s.evals = run.evals;
  s.final_loss = epoch_loss_count_ > 0 ? epoch_loss_sum_ / static_cast<double>(epoch_loss_count_) : last_epoch_loss_;
  // The first steps create the optimizer state, fill the allocator cache and oneDNN's primitive
  // cache: not representative when there are enough later steps to time.
  const auto warm = static_cast<int64_t>(run.step_ms.size()) > options_.timing_warmup_steps
                        ? options_.timing_warmup_steps
                        : int64_t{0};
  s.step_ms_median = median(std::vector<double>(run.step_ms.begin() + warm, run.step_ms.end()));
  s.samples_per_sec = s.step_ms_median > 0 ? 1000.0 * static_cast<double>(s.global_batch_size) / s.step_ms_median : 0;
  if (options_.flops_per_sample > 0)
    s.gflops = static_cast<double>(options_.flops_per_sample) * s.samples_per_sec / 1e9;
  s.peak_bytes = std::max<int64_t>(0, run.peak - run.other_bytes);
  s.peak_breakdown = run.peak_breakdown;
  s.peak_breakdown.total_bytes = s.peak_bytes;
  s.peak_breakdown.bytes[static_cast<size_t>(memory::Category::kOther)] -= run.other_bytes;
  s.skipped_steps = skipped_steps_;
  s.final_scale = scaler_.get_scale();
  s.threads = get_num_threads();
  s.cpu = cpu::cpu_name();
  s.isa = std::string(cpu::to_string(cpu::isa()));
  s.products = products(options_.precision.precision, run.device);
  s.train_seconds = std::chrono::duration<double>(Clock::now() - run.start).count();
  s.num_parameters = model_->num_parameters();
  const optim::ModelStateBytes state = optimizer_->model_state_bytes();
  s.model_state_bytes = state.total();
  s.model_state_bytes_per_param = state.bytes_per_param();
  s.optimizer_state_bytes = optimizer_->state_bytes().total();
  s.seed = options_.seed;
  s.lr = optimizer_->lr(0);
  s.resumed_from = resumed_from_;
  return s;
}

}  // namespace mixtrain::train
