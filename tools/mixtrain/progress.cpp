// Progress bar and per-epoch lines.
#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mixtrain::cli {

namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

// Columns of the terminal: a redrawn line must not wrap, or "\r" would only rewind its last row.
size_t terminal_width() {
  winsize w{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 100;
}

}  // namespace

Progress::Progress(std::string label, bool terminal) : label_(std::move(label)), terminal_(terminal) {}

bool Progress::stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

void Progress::attach(train::TrainerOptions& options) {
  options.on_step = [this](const train::StepInfo& i) { on_step(i); };
  options.on_epoch = [this](const train::EpochInfo& i) { on_epoch(i); };
}

void Progress::clear_bar() {
  if (bar_shown_) {
    std::fputs("\r\033[K", stdout);
    bar_shown_ = false;
  }
}

void Progress::on_step(const train::StepInfo& i) {
  last_ = i;
  samples_ += i.samples;
  if (i.eval) {
    clear_bar();
    std::printf("%sstep %lld/%lld  validation loss %.4f", label_.c_str(), static_cast<long long>(i.step),
                static_cast<long long>(i.total_steps), i.eval->loss);
    if (i.eval->per_token()) std::printf("  perplexity %.2f", i.eval->perplexity());
    if (i.eval->accuracy) std::printf("  accuracy %.2f%%", 100.0 * *i.eval->accuracy);
    std::printf("  train loss %.4f\n", i.loss);
    std::fflush(stdout);
  }
  if (!terminal_) return;
  // Redraw ~10 times a second: a terminal write per step would cost more than a small model's step.
  const auto now = std::chrono::steady_clock::now();
  if (i.step != i.total_steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double per_step = i.elapsed_s / static_cast<double>(i.steps_this_run);
  // Averaged over the run so far (data loading included): one step's time is too noisy to read.
  const double rate = static_cast<double>(samples_) / std::max(i.elapsed_s, 1e-9);
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * i.batch / std::max<int64_t>(1, i.batches_per_epoch));
  std::string bar(static_cast<size_t>(filled), '=');
  bar.resize(kWidth, ' ');
  char line[512];
  // ETA early in the line: a narrow terminal cuts the end.
  std::snprintf(line, sizeof line, "%sepoch %lld/%lld [%s] step %lld/%lld  ETA %s  loss %.4f  %.0f samples/s  scale %g",
                label_.c_str(), static_cast<long long>(i.epoch), static_cast<long long>(i.epochs), bar.c_str(),
                static_cast<long long>(i.step), static_cast<long long>(i.total_steps),
                clock_text(per_step * static_cast<double>(i.total_steps - i.step)).c_str(), i.loss, rate, i.scale);
  std::string text(line);
  if (i.grad_norm) {
    std::snprintf(line, sizeof line, "  grad norm %.3g", *i.grad_norm);
    text += line;
  }
  if (text.size() >= terminal_width()) text.resize(terminal_width() - 1);
  std::printf("\r\033[K%s", text.c_str());
  std::fflush(stdout);
  bar_shown_ = true;
}

void Progress::on_epoch(const train::EpochInfo& e) {
  clear_bar();
  const int64_t samples = samples_ - epoch_first_samples_;
  const double seconds = e.seconds;  // excludes the evaluation of the previous epoch
  std::printf("%sepoch %lld/%lld  step %lld  train loss %.4f", label_.c_str(), static_cast<long long>(e.epoch),
              static_cast<long long>(e.epochs), static_cast<long long>(e.step), e.train_loss);
  if (e.eval) {
    if (e.eval->accuracy) std::printf("  test acc %.2f%%", 100.0 * *e.eval->accuracy);
    std::printf("  test loss %.4f", e.eval->loss);
  }
  if (samples > 0 && seconds > 0) std::printf("  %.0f samples/s", static_cast<double>(samples) / seconds);
  std::printf("  scale %g  %.1f s\n", last_.scale, e.seconds);
  std::fflush(stdout);
  epoch_first_samples_ = samples_;
}

void Progress::finish() {
  clear_bar();
  std::fflush(stdout);
}

}  // namespace mixtrain::cli
