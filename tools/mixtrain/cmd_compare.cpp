// mixtrain compare: the same model, data and seed trained in several precisions; one table,
// DIR/report.md and a plot through gnuplot (losses, their differences to fp32, accuracy per epoch,
// step time and memory).
#include <mixtrain/error.h>
#include <mixtrain/io/file.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "commands.h"
#include "run_setup.h"
#include "gnuplot.h"

extern char** environ;

namespace mixtrain::cli {

namespace fs = std::filesystem;

namespace {

struct CompareArgs {
  RunArgs run;
  std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};
};

CLI::App* add_compare_flags(CLI::App& app, CompareArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train the same model, data and seed in several precisions and compare accuracy, speed and memory");
  cmd->add_option("--precisions", args.precisions, "Comma-separated precisions to compare")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}))
      ->capture_default_str();
  add_run_flags(*cmd, args.run, Flags::kModel | Flags::kData | Flags::kTraining | Flags::kCommon);
  cmd->add_option("--master-weights", args.run.master_weights,
                  "fp32 (fp32 weights through autocast) or same (each 16-bit run stores its weights in its own dtype "
                  "with fp32 masters in the optimizer)")
      ->check(CLI::IsMember({"fp32", "same"}))
      ->capture_default_str();
  cmd->add_option("--out", args.run.out, "Output directory (default runs/compare)")->check(non_empty());
  return cmd;
}

struct Row {
  std::string precision;
  train::TrainSummary s;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Cells of the table; the fp32 row (when present) is the reference for the two ratios.
std::vector<std::vector<std::string>> table_cells(const std::vector<Row>& rows) {
  const Row* ref = nullptr;
  for (const Row& r : rows)
    if (r.precision == "fp32") ref = &r;
  // A language model's validation is read as perplexity too.
  const bool per_token = !rows.empty() && !rows[0].s.evals.empty() && rows[0].s.evals.back().result.per_token();
  std::vector<std::vector<std::string>> cells = {{"precision", "test accuracy", "test loss", "final loss", "step time",
                                                  "speedup vs fp32", "peak memory", "memory vs fp32", "skipped steps",
                                                  "final scale"}};
  if (per_token) cells[0].insert(cells[0].begin() + 3, "test perplexity");
  for (const Row& r : rows) {
    const train::TrainSummary& s = r.s;
    const bool ratios = ref != nullptr && s.step_ms_median > 0 && ref->s.peak_bytes > 0;
    cells.push_back(
        {r.precision, s.test_accuracy ? fmt("%.2f%%", 100.0 * *s.test_accuracy) : "-",
         s.test_loss ? fmt("%.4f", *s.test_loss) : "-", fmt("%.4f", s.final_loss), fmt("%.2f ms", s.step_ms_median),
         ratios ? fmt("%.2fx", ref->s.step_ms_median / s.step_ms_median) : "-",
         human_bytes(static_cast<double>(s.peak_bytes)),
         ratios ? fmt("%.2fx", static_cast<double>(s.peak_bytes) / static_cast<double>(ref->s.peak_bytes)) : "-",
         std::to_string(s.skipped_steps), fmt("%g", s.final_scale)});
    if (per_token) cells.back().insert(cells.back().begin() + 3, s.test_loss ? fmt("%.2f", std::exp(*s.test_loss)) : "-");
  }
  return cells;
}

// Validation loss at every evaluation of the runs (--eval-every), one column per precision; empty
// when the runs evaluated at most once.
std::vector<std::vector<std::string>> eval_cells(const std::vector<Row>& rows) {
  std::vector<int64_t> steps;
  for (const Row& r : rows)
    for (const train::TrainSummary::Eval& e : r.s.evals) steps.push_back(e.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  if (steps.size() < 2) return {};
  std::vector<std::vector<std::string>> cells = {{"step"}};
  for (const Row& r : rows) cells[0].push_back(r.precision + " validation loss");
  for (const int64_t step : steps) {
    cells.push_back({std::to_string(step)});
    for (const Row& r : rows) {
      const auto it = std::find_if(r.s.evals.begin(), r.s.evals.end(),
                                   [step](const train::TrainSummary::Eval& e) { return e.step == step; });
      cells.back().push_back(it == r.s.evals.end() ? "-" : fmt("%.4f", it->result.loss));
    }
  }
  return cells;
}

// The trailing moving average of `v` over `window` values at each index (summed afresh, not as a
// running sum: one NaN loss must not poison every later point).
std::vector<double> moving_average(const std::vector<double>& v, size_t n, size_t window) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t first = i + 1 >= window ? i + 1 - window : 0;
    double sum = 0;
    for (size_t j = first; j <= i; ++j) sum += v[j];
    out[i] = sum / static_cast<double>(i + 1 - first);
  }
  return out;
}

std::string number(double v) { return std::isfinite(v) ? fmt("%.9g", v) : "NaN"; }  // gnuplot leaves a gap

// Writes the data and gnuplot script of DIR/loss.png and runs gnuplot when it is installed; returns
// whether the image was made. Four panels, because the curves of the precisions lie on top of each
// other and show nothing by themselves:
//   DIR/loss.dat    step, each run's training loss (trailing moving average), then each run's
//                   difference to fp32's (the panels "training loss" and "loss - fp32 loss")
//   DIR/epochs.dat  epoch, each run's test accuracy (%), then its difference to fp32's (points)
//   DIR/speed.dat   one line per run: its step-time speedup and peak memory against fp32's
// Without an fp32 run the difference panels compare with the first precision given.
bool plot_comparison(const fs::path& dir, const std::vector<Row>& rows, const std::vector<RunCurves>& curves) {
  size_t ref = 0;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k].precision == "fp32") ref = k;
  const std::string ref_name = rows[ref].precision;
  size_t steps = curves.empty() ? 0 : curves[0].losses.size();
  size_t epochs = curves.empty() ? 0 : curves[0].epoch_accuracy.size();
  for (const RunCurves& c : curves) {
    steps = std::min(steps, c.losses.size());
    epochs = std::min(epochs, c.epoch_accuracy.size());
  }
  const size_t window = std::clamp<size_t>(steps / 50, 1, 50);
  std::vector<std::vector<double>> smooth;
  for (const RunCurves& c : curves) smooth.push_back(moving_average(c.losses, steps, window));
  {
    std::ostringstream dat;
    dat << "# step, training loss (mean of the last " << window << " steps) of";
    for (const Row& r : rows) dat << ' ' << r.precision;
    dat << ", then each minus " << ref_name << "'s\n";
    for (size_t i = 0; i < steps; ++i) {
      dat << i + 1;
      for (const auto& l : smooth) dat << ' ' << number(l[i]);
      for (const auto& l : smooth) dat << ' ' << number(l[i] - smooth[ref][i]);
      dat << '\n';
    }
    io::write_file_atomic((dir / "loss.dat").string(), dat.str(), "mixtrain compare");
  }
  {
    std::ostringstream dat;
    dat << "# epoch, test accuracy (%) of";
    for (const Row& r : rows) dat << ' ' << r.precision;
    dat << ", then each minus " << ref_name << "'s (points)\n";
    for (size_t e = 0; e < epochs; ++e) {
      dat << e + 1;
      for (const RunCurves& c : curves) dat << ' ' << number(c.epoch_accuracy[e]);
      for (const RunCurves& c : curves) dat << ' ' << number(c.epoch_accuracy[e] - curves[ref].epoch_accuracy[e]);
      dat << '\n';
    }
    io::write_file_atomic((dir / "epochs.dat").string(), dat.str(), "mixtrain compare");
  }
  {
    std::ostringstream dat;
    dat << "# index precision speedup_vs_" << ref_name << " memory_vs_" << ref_name << "\n";
    const train::TrainSummary& r0 = rows[ref].s;
    for (size_t k = 0; k < rows.size(); ++k) {
      const train::TrainSummary& s = rows[k].s;
      dat << k << ' ' << rows[k].precision << ' '
          << number(s.step_ms_median > 0 ? r0.step_ms_median / s.step_ms_median : std::nan("")) << ' '
          << number(r0.peak_bytes > 0 ? static_cast<double>(s.peak_bytes) / static_cast<double>(r0.peak_bytes)
                                      : std::nan(""))
          << '\n';
    }
    io::write_file_atomic((dir / "speed.dat").string(), dat.str(), "mixtrain compare");
  }
  const std::string loss = (dir / "loss.dat").string(), ep = (dir / "epochs.dat").string(),
                    speed = (dir / "speed.dat").string();
  const size_t n = rows.size();
  std::ostringstream gp;
  gp << "# gnuplot script written by mixtrain compare: gnuplot loss.gp (in this directory)\n"
     << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
     << "  set terminal pngcairo size 1280,860 noenhanced\n"
     << "} else {\n"
     << "  set terminal png size 1280,860 noenhanced\n"
     << "}\n"
     << "if (!exists('out')) out = '" << (dir / "loss.png").string() << "'\n"
     << "set output out\n"
     << "set multiplot layout 2,2\n"
     << "set grid\n"
     << "set key top right\n"
     << "set title 'training loss (moving average over " << window << " steps)'\n"
     << "set xlabel 'step'\nset ylabel 'loss'\n"
     << "plot";
  for (size_t k = 0; k < n; ++k)
    gp << (k ? "," : "") << " '" << loss << "' using 1:" << k + 2 << " with lines lw 2 title '" << rows[k].precision
       << "'";
  gp << "\nset title 'training loss minus that of " << ref_name << "'\nset ylabel 'loss difference'\nplot";
  for (size_t k = 0; k < n; ++k)
    gp << (k ? "," : "") << " '" << loss << "' using 1:" << n + k + 2 << " with lines lw 2 title '"
       << rows[k].precision << "'";
  gp << "\nset title 'test accuracy minus that of " << ref_name << ", per epoch'\nset xlabel 'epoch'\n"
     << "set ylabel 'percentage points'\nset xtics 1\n";
  if (epochs == 0) {
    gp << "unset key\nset label 1 'no epoch was evaluated' at graph 0.5, graph 0.5 center\n"
       << "plot [0:1] [-1:1] 0 with lines lc rgb 'grey'\nunset label 1\nset key top right\n";
  } else {
    gp << "plot";
    for (size_t k = 0; k < n; ++k)
      gp << (k ? "," : "") << " '" << ep << "' using 1:" << n + k + 2 << " with linespoints lw 2 pt 7 title '"
         << rows[k].precision << "'";
    gp << '\n';
  }
  gp << "set title 'step time and peak memory against " << ref_name << "'\nset xlabel ''\nset xtics autofreq\n"
     << "set key top left horizontal\nset yrange [0:*]\nset offsets 0, 0, graph 0.15, 0\n"
     << "set ylabel 'x " << ref_name << "'\nset style data histograms\nset style histogram clustered gap 1\n"
     << "set style fill solid 0.8 border -1\nset boxwidth 0.9\n"
     << "plot '" << speed << "' using 3:xtic(2) title 'speedup (step time)', '' using 4 title 'peak memory'\n"
     << "unset multiplot\n";
  io::write_file_atomic((dir / "loss.gp").string(), gp.str(), "mixtrain compare");
  return run_gnuplot((dir / "loss.gp").string(), (dir / "loss.png").string());
}

int run_compare(const CompareArgs& in) {
  RunArgs a = in.run;
  if (a.out.empty()) a.out = "runs/compare";
  const std::set<std::string> unique(in.precisions.begin(), in.precisions.end());
  if (unique.size() != in.precisions.size()) throw UsageError("--precisions lists a precision twice");
  if (in.precisions.empty()) throw UsageError("--precisions is empty");
  const DataSpec spec = parse_data_spec(a.data);
  for (const std::string& p : in.precisions) check_combination(a, spec, train::parse_precision(p));
  // The directory holds one comparison: refuse another's files unless --overwrite (each precision's
  // Trainer checks its own subdirectory the same way).
  std::error_code ec;
  if (fs::exists(a.out, ec) && !fs::is_directory(a.out, ec))
    throw UsageError("--out '" + a.out + "' exists and is not a directory");
  // Ours for the whole comparison, before anything there is read or written.
  const auto lock = io::DirectoryLock::acquire(a.out, "--out");
  if (holds_files(a.out) && !a.trainer.overwrite)
    throw UsageError("the output directory '" + a.out +
                     "' is not empty: it holds another comparison. Choose another --out, or pass --overwrite");
  parse_device(a.device);  // an unusable --device is refused before the data is loaded
  const int threads = apply_threads(a.threads);
  const cli::ModelInfo info = run_model_info(a);
  const std::unique_ptr<TextCodec> codec = run_codec(a);
  LoadedData data = load_data(spec, a, info, codec.get());
  std::printf(
      "mixtrain compare: %s (%lld parameters) on %s; batch %s, AdamW lr %g (%s) wd %g, seed %llu, %d threads\n",
      a.model.c_str(), static_cast<long long>(info.num_parameters), describe(spec).c_str(),
      describe_batch(a, processes()).c_str(), a.lr, describe_lr_decay(a).c_str(), a.weight_decay,
      static_cast<unsigned long long>(a.trainer.seed), threads);
  std::printf("cpu %s\n", cpu::describe().c_str());
  std::fflush(stdout);

  std::vector<Row> rows;
  std::vector<RunCurves> curves;
  for (const std::string& name : in.precisions) {
    const train::Precision p = train::parse_precision(name);
    const DType param_dtype = a.master_weights == "same" ? train::autocast_dtype(p).value_or(kFloat32) : kFloat32;
    curves.emplace_back();
    rows.push_back({name, run_training(a, p, param_dtype, data, (fs::path(a.out) / name).string(), "[" + name + "] ",
                                       &curves.back())});
    const train::TrainSummary& s = rows.back().s;
    std::printf("[%s] done: %lld steps, %.1f s\n", name.c_str(), static_cast<long long>(s.steps), s.train_seconds);
    std::fflush(stdout);
  }

  const auto cells = table_cells(rows);
  const auto evals = eval_cells(rows);
  std::vector<std::pair<std::string, memory::Breakdown>> peaks;
  for (const Row& r : rows) peaks.emplace_back(r.precision, r.s.peak_breakdown);
  const auto memory_cells = breakdown_cells(peaks);
  if (!evals.empty()) std::printf("\n%s", text_table(evals).c_str());
  std::printf("\n%s", text_table(cells).c_str());
  std::printf("\n%s", text_table(memory_cells).c_str());
  const fs::path dir(a.out);
  const bool plotted = plot_comparison(dir, rows, curves);

  std::ostringstream md;
  md << "# mixtrain compare: " << a.model << " on " << describe(spec) << "\n\n"
     << "Same model initialisation, data order and seed in every precision. " << rows[0].s.steps
     << (rows[0].s.steps == 1 ? " step (" : " steps (") << fmt("%.2f", rows[0].s.epochs) << " epochs), batch "
     << describe_batch(a, rows[0].s.world_size) << ", AdamW lr " << a.lr << " (" << describe_lr_decay(a) << ") weight decay " << a.weight_decay
     << ", seed " << a.trainer.seed << ", " << threads << " threads on " << cpu::describe() << ", "
     << (a.master_weights == "same" ? "16-bit parameters with fp32 masters" : "fp32 parameters through autocast")
     << ".\n\n"
     << markdown_table(cells) << "\n"
     << "Step time is the median over the steps after warm-up; peak memory counts every tensor byte of training "
        "(weights, gradients, optimizer state, activations), not the dataset.\n\n";
  md << "What the bytes at each run's peak were for, and what was running then:\n\n" << markdown_table(memory_cells) << "\n";
  if (!evals.empty()) md << "Validation during training:\n\n" << markdown_table(evals) << "\n";
  if (plotted)
    md << "![training loss, its difference to fp32, test accuracy against fp32 per epoch, step time and peak "
          "memory against fp32](loss.png)\n\n";
  md << "Per-run files: ";
  for (const Row& r : rows) md << "`" << r.precision << "/summary.json` ";
  md << "(and metrics.jsonl, model.safetensors, checkpoint.safetensors beside each).\n";
  io::write_file_atomic((dir / "report.md").string(), md.str(), "mixtrain compare");
  std::printf("\nwrote %s/report.md%s and %s/<precision>/\n", a.out.c_str(), plotted ? ", loss.png" : "",
              a.out.c_str());
  // One event file per precision directory: TensorBoard shows each as a run and overlays them.
  if (!a.no_tensorboard) std::printf("tensorboard --logdir %s overlays the precisions\n", a.out.c_str());
  return 0;
}

class CompareCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_compare_flags(app, args_); }
  void check() const override { check_run_flags(args_.run, args_.precisions); }
  int run() override { return run_compare(args_); }

 private:
  CompareArgs args_;
};

}  // namespace

std::unique_ptr<Command> make_compare_command() { return std::make_unique<CompareCommand>(); }

}  // namespace mixtrain::cli
