// The MPI process group: the MPI world, driven from one communication thread.
//
// Every MPI call after start-up runs on the group's communication thread, which initialises MPI
// itself (so MPI_THREAD_FUNNELED suffices) and takes tasks from a queue in issue order. A caller
// enqueues a collective and gets a Work back; all_reduce_async returns at once, so the caller can
// go on computing (backward) while a bucket is reduced: Open MPI 4.1 makes progress only inside MPI
// calls, so overlap needs a thread that is inside one (docs/distributed.md). broadcast, barrier and
// all_gather enqueue and wait.
//
// Two calls are made from other threads, both on the way out of the process: MPI_Abort (from
// abort(), the terminate handler and the watchdog) and the MPI_Initialized / MPI_Finalized checks
// before it. MPI_Abort is what MPI offers for ending a job from a broken state; Open MPI's kills
// the job through its launcher whatever the other threads are doing.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/process_group_internal.h"
#include "mixtrain/error.h"
#include "mixtrain/half.h"

namespace mixtrain::dist::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Largest element count per MPI call (counts are int); larger tensors go in pieces.
constexpr int64_t kMaxCount = int64_t{1} << 30;
// 16-bit tensors are widened to fp32 in pieces of this many elements (a 16 MiB staging buffer).
constexpr int64_t kStageElements = int64_t{1} << 22;
constexpr double kDefaultTimeoutS = 1800;  // PyTorch's default for its non-NCCL groups
constexpr const char* kTimeoutVar = "MIXTRAIN_DIST_TIMEOUT";

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(std::max(len, 0)));
}

// Turns an MPI return code into mt::Error naming the call and what it was doing.
void mpi_check(int rc, const char* call, const std::string& context) {
  if (rc != MPI_SUCCESS) [[unlikely]]
    MT_FAIL("dist: ", call, " failed (", context, "): ", mpi_error_text(rc));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

// MIXTRAIN_DIST_TIMEOUT: seconds, 0 for none.
double read_timeout() {
  const char* env = std::getenv(kTimeoutVar);
  if (env == nullptr || *env == '\0') return kDefaultTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  MT_CHECK(end != env && *end == '\0' && std::isfinite(s) && s >= 0, kTimeoutVar, "=",
           mixtrain::detail::quote_untrusted(env),
           " is not a number of seconds: set how long one collective may take before the job is "
           "aborted (default 1800), or 0 for no limit");
  return s;
}

// What an uncaught exception was, for the terminate handler.
std::string describe_current_exception() {
  const std::exception_ptr e = std::current_exception();
  if (!e) return "std::terminate was called without an exception";
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return std::string("uncaught mt::Error: ") + x.what();
  } catch (const std::exception& x) {
    return std::string("uncaught exception: ") + x.what();
  } catch (...) {
    return "uncaught exception that is not a std::exception";
  }
}

// One queued collective. The group's thread runs it once; callers wait for it.
class MpiWork final : public Work {
 public:
  MpiWork(std::string what, std::function<void()> fn, Tensor keep)
      : what_(std::move(what)), fn_(std::move(fn)), keep_(std::move(keep)) {}

  void wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override { return done_.load(std::memory_order_acquire); }

  const std::string& what() const { return what_; }

  // On the group's thread. Returns the error message, empty when the collective succeeded.
  std::string run() {
    std::string message;
    try {
      fn_();
    } catch (const Error& e) {
      message = e.what();
      error_ = std::current_exception();
    } catch (const std::exception& e) {
      message = std::string("dist: collective ") + what_ + " failed: " + e.what();
      error_ = std::make_exception_ptr(Error(message));
    }
    finish();
    return message;
  }
  void fail(const std::string& message) {
    error_ = std::make_exception_ptr(Error(message));
    finish();
  }

 private:
  void finish() {
    fn_ = nullptr;
    {
      std::lock_guard lock(mu_);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  std::string what_;
  std::function<void()> fn_;
  Tensor keep_;  // the tensor worked on, alive until the Work is dropped
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;  // written before done_, read after it
};

class MpiProcessGroup;
std::atomic<MpiProcessGroup*> g_group{nullptr};
std::terminate_handler g_previous_terminate = nullptr;
std::atomic<bool> g_aborting{false};

void on_terminate();

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() : timeout_s_(read_timeout()) {
    std::promise<void> started;
    std::future<void> ready = started.get_future();
    // The thread owns the promise: it may still be inside set_value() when this constructor returns.
    thread_ = std::thread([this, started = std::move(started)]() mutable { run_thread(started); });
    try {
      ready.get();
    } catch (...) {
      thread_.join();
      throw;
    }
    if (timeout_s_ > 0) watchdog_ = std::thread([this] { run_watchdog(); });
    g_group.store(this);
    g_previous_terminate = std::set_terminate(on_terminate);
  }

  ~MpiProcessGroup() override {
    std::set_terminate(g_previous_terminate);
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is queued, then finalizes
    if (watchdog_.joinable()) {
      {
        std::lock_guard lock(watchdog_mu_);
        watchdog_stop_ = true;
      }
      watchdog_cv_.notify_all();
      watchdog_.join();
    }
    g_group.store(nullptr);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op) override {
    check_all_reduce(tensor, op);
    tensor.bump_version();
    const DType dtype = tensor.dtype();
    const int64_t n = tensor.numel();
    void* data = tensor.raw_data();
    std::string what = mixtrain::detail::concat("all_reduce ", to_string(op), " of ", n, " ", dtype, " elements");
    return enqueue(std::move(what), [this, data, n, dtype, op] { all_reduce_now(data, n, dtype, op); }, tensor);
  }

  void broadcast(const Tensor& tensor, int root) override {
    check_broadcast(tensor, root, size_);
    if (rank_ != root) tensor.bump_version();
    char* data = static_cast<char*>(tensor.raw_data());
    const int64_t nbytes = static_cast<int64_t>(tensor.nbytes());
    std::string what = mixtrain::detail::concat("broadcast from rank ", root, " of ", tensor.numel(), " ",
                                                tensor.dtype(), " elements");
    enqueue(std::move(what),
            [this, data, nbytes, root] {
              int64_t done = 0;
              do {
                const int count = static_cast<int>(std::min(nbytes - done, kMaxCount));
                mpi_check(MPI_Bcast(data + done, count, MPI_BYTE, root, comm_), "MPI_Bcast", context());
                done += count;
              } while (done < nbytes);
            },
            tensor)
        ->wait();
  }

  void barrier() override {
    enqueue("barrier", [this] { mpi_check(MPI_Barrier(comm_), "MPI_Barrier", context()); })->wait();
  }

  std::vector<int64_t> all_gather(int64_t value) override {
    std::vector<int64_t> out(static_cast<size_t>(size_));
    enqueue("all_gather of an int64",
            [this, value, &out] {
              mpi_check(MPI_Allgather(&value, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, comm_), "MPI_Allgather",
                        context());
            })
        ->wait();
    return out;
  }

  std::vector<std::string> all_gather(const std::string& value) override {
    MT_CHECK(value.size() <= static_cast<size_t>(INT_MAX / std::max(size_, 1)),
             "dist: all_gather of a string of ", value.size(), " bytes: too long (it is meant for names and shapes)");
    std::vector<std::string> out(static_cast<size_t>(size_));
    enqueue("all_gather of a string",
            [this, &value, &out] {
              const int len = static_cast<int>(value.size());
              std::vector<int> lens(static_cast<size_t>(size_));
              mpi_check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_), "MPI_Allgather", context());
              std::vector<int> offsets(static_cast<size_t>(size_));
              int64_t total = 0;
              for (size_t r = 0; r < lens.size(); ++r) {
                offsets[r] = static_cast<int>(total);
                total += lens[r];
                MT_CHECK(total <= INT_MAX, "dist: all_gather of strings of ", total, " bytes in all: too long");
              }
              std::string all(static_cast<size_t>(total), '\0');
              mpi_check(MPI_Allgatherv(value.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                                       comm_),
                        "MPI_Allgatherv", context());
              for (size_t r = 0; r < lens.size(); ++r) out[r] = all.substr(static_cast<size_t>(offsets[r]), lens[r]);
            })
        ->wait();
    return out;
  }

  void all_gather(const Tensor& input, const Tensor& output) override {
    check_all_gather(input, output, size_);
    output.bump_version();
    const void* in = input.raw_data();
    void* out = output.raw_data();
    const int nbytes = static_cast<int>(input.nbytes());  // checked: <= INT_MAX
    std::string what = mixtrain::detail::concat("all_gather of ", input.numel(), " ", input.dtype(), " elements per rank");
    enqueue(std::move(what),
            [this, in, out, nbytes] {
              mpi_check(MPI_Allgather(in, nbytes, MPI_BYTE, out, nbytes, MPI_BYTE, comm_), "MPI_Allgather", context());
            },
            output)
        ->wait();
  }

  [[noreturn]] void abort(int exit_code, const std::string& why) override {
    if (g_aborting.exchange(true)) {
      // Another thread is already ending the job.
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::fprintf(stderr, "mixtrain: rank %d of %d: %s\n", rank_, size_, why.c_str());
    std::fflush(nullptr);
    if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  std::shared_ptr<MpiWork> enqueue(std::string what, std::function<void()> fn, Tensor keep = {}) {
    std::shared_ptr<MpiWork> work;
    {
      std::lock_guard lock(mu_);
      MT_CHECK(!stop_, "dist: ", what, " issued while the MPI process group is shutting down (at process exit)");
      ++issued_;
      work = std::make_shared<MpiWork>(mixtrain::detail::concat("#", issued_, ": ", what), std::move(fn),
                                       std::move(keep));
      queue_.push_back(work);
    }
    cv_.notify_one();
    return work;
  }

  // The rank and the collective running now, for error messages (group thread only).
  std::string context() const {
    return mixtrain::detail::concat("rank ", rank_, " of ", size_, ", collective ", current_what_);
  }

  // --- on the group's thread -------------------------------------------------------------------

  void run_thread(std::promise<void>& started) {
    try {
      start_mpi();
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    started.set_value();
    for (;;) {
      std::shared_ptr<MpiWork> work;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and nothing left to run
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!broken_.empty()) {
        work->fail("dist: collective " + work->what() + " not run: the MPI process group failed earlier (" + broken_ +
                   ")");
        continue;
      }
      begin(work->what());
      broken_ = work->run();
      end();
    }
    stop_mpi();
  }

  void start_mpi() {
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized), "MPI_Initialized", "start-up");
    int provided = MPI_THREAD_SINGLE;
    if (initialized) {
      // The application initialised MPI and may call it from its own threads while this one does.
      mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread", "start-up");
      MT_CHECK(provided == MPI_THREAD_MULTIPLE, "dist: MPI was initialised by the application with ",
               thread_level_name(provided),
               "; mixtrain's process group calls MPI from its own thread, alongside the application's calls, and "
               "needs MPI_THREAD_MULTIPLE. Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or "
               "leave it to mixtrain (dist::world() initialises and finalizes MPI itself)");
      owns_mpi_ = false;
    } else {
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", "start-up");
      owns_mpi_ = true;
      // Errors come back as return codes (checked, turned into mt::Error) instead of ending the job.
      mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "start-up");
      MT_CHECK(provided >= MPI_THREAD_FUNNELED, "dist: this MPI library provides only ", thread_level_name(provided),
               "; mixtrain's process group needs MPI_THREAD_FUNNELED (all its calls are made on one thread that is "
               "not the main thread)");
    }
    // A communicator of our own: no collective of the application's can match one of ours.
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup", "start-up");
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "start-up");
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", "start-up");
    mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", "start-up");
  }

  void stop_mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;  // the application finalized MPI before exit
    begin("MPI_Finalize at process exit");
    MPI_Comm_free(&comm_);
    // Not checked: nothing could be done about a failure here, at exit.
    if (owns_mpi_) MPI_Finalize();
    end();
  }

  void begin(const std::string& what) {
    {
      std::lock_guard lock(current_mu_);
      current_what_ = what;
    }
    current_since_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(),
                            std::memory_order_release);
  }
  void end() { current_since_ns_.store(0, std::memory_order_release); }

  void all_reduce_now(void* data, int64_t n, DType dtype, ReduceOp op) {
    const MPI_Op mpi_op = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    switch (dtype) {
      case kFloat32:
        reduce_native(data, n, MPI_FLOAT, sizeof(float), mpi_op);
        if (op == ReduceOp::kAvg) divide(static_cast<float*>(data), n);
        return;
      case kFloat64:
        reduce_native(data, n, MPI_DOUBLE, sizeof(double), mpi_op);
        if (op == ReduceOp::kAvg) divide(static_cast<double*>(data), n);
        return;
      case kInt64: reduce_native(data, n, MPI_INT64_T, sizeof(int64_t), mpi_op); return;
      case kInt32: reduce_native(data, n, MPI_INT32_T, sizeof(int32_t), mpi_op); return;
      case kBFloat16:
        reduce_widened(static_cast<bfloat16*>(data), n, op, convert_bf16_to_fp32, convert_fp32_to_bf16);
        return;
      case kFloat16:
        reduce_widened(static_cast<float16*>(data), n, op, convert_fp16_to_fp32, convert_fp32_to_fp16);
        return;
      default: MT_INTERNAL_ASSERT(false, "all_reduce of ", dtype, " passed the checks");
    }
  }

  void reduce_native(void* data, int64_t n, MPI_Datatype type, size_t element_size, MPI_Op op) {
    char* bytes = static_cast<char*>(data);
    int64_t done = 0;
    do {
      const int count = static_cast<int>(std::min(n - done, kMaxCount));
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * static_cast<int64_t>(element_size), count, type, op, comm_),
                "MPI_Allreduce", context());
      done += count;
    } while (done < n);
  }

  template <typename T>
  void divide(T* data, int64_t n) const {
    const T w = static_cast<T>(size_);
    for (int64_t i = 0; i < n; ++i) data[i] /= w;
  }

  // 16-bit: widen a piece to fp32, reduce it in fp32, round it back once.
  template <typename Half>
  void reduce_widened(Half* data, int64_t n, ReduceOp op, void (*widen)(const Half*, float*, int64_t),
                      void (*narrow)(const float*, Half*, int64_t)) {
    const MPI_Op mpi_op = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    int64_t done = 0;
    do {
      const int64_t count = std::min(n - done, kStageElements);
      if (static_cast<int64_t>(staging_.size()) < count) staging_.resize(static_cast<size_t>(count));
      widen(data + done, staging_.data(), count);
      mpi_check(MPI_Allreduce(MPI_IN_PLACE, staging_.data(), static_cast<int>(count), MPI_FLOAT, mpi_op, comm_),
                "MPI_Allreduce", context());
      if (op == ReduceOp::kAvg) divide(staging_.data(), count);
      narrow(staging_.data(), data + done, count);
      done += count;
    } while (done < n);
  }

  // --- the watchdog ------------------------------------------------------------------------------

  void run_watchdog() {
    const auto limit = std::chrono::duration<double>(timeout_s_);
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::clamp(limit / 4, std::chrono::duration<double>(0.05), std::chrono::duration<double>(1.0)));
    std::unique_lock lock(watchdog_mu_);
    while (!watchdog_stop_) {
      watchdog_cv_.wait_for(lock, period);
      const int64_t since = current_since_ns_.load(std::memory_order_acquire);
      if (since == 0) continue;
      const auto running = Clock::now().time_since_epoch() - std::chrono::nanoseconds(since);
      if (running < limit) continue;
      std::string what;
      {
        std::lock_guard current(current_mu_);
        what = current_what_;
      }
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s_);
      abort(1, mixtrain::detail::concat(
                   "dist: collective ", what, " has not completed after ", seconds, " s (", kTimeoutVar, "=", seconds,
                   "): another rank has stopped issuing collectives, or issued a different sequence; "
                   "ending the MPI job"));
    }
  }

  const double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool owns_mpi_ = false;

  std::thread thread_;
  std::mutex mu_;  // guards queue_, stop_, issued_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<MpiWork>> queue_;
  bool stop_ = false;
  uint64_t issued_ = 0;

  // The group thread's own state.
  std::vector<float> staging_;
  std::string broken_;  // the first failure; later collectives are not run

  // What the group thread is doing, for the watchdog and for messages.
  std::mutex current_mu_;
  std::string current_what_;
  std::atomic<int64_t> current_since_ns_{0};  // steady-clock ns when it began; 0 when idle

  std::thread watchdog_;
  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool watchdog_stop_ = false;
};

void on_terminate() {
  MpiProcessGroup* group = g_group.load();
  if (group != nullptr && mpi_active()) group->abort(1, describe_current_exception() + "; ending the MPI job");
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_world_group() { return std::make_unique<MpiProcessGroup>(); }

}  // namespace mixtrain::dist::detail
