// mixtrain/autograd.h: define-by-run reverse-mode autograd.
//
// Every differentiable op that sees an input requiring grad (while grad mode is on) creates a Node
// holding what its backward needs and edges to the nodes that produced its inputs. backward() walks
// the graph in reverse topological order, sums the gradients arriving at each node, and leaves
// accumulate into `.grad` in their own dtype (an fp32 parameter used through a bf16 cast gets an
// fp32 gradient).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain {

// Thread-local switch: while off, ops record no graph.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables graph recording for its scope, restores the previous mode on exit.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// RAII: enables graph recording (inside a NoGradGuard, e.g.).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

using TensorList = std::vector<Tensor>;

struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  uint32_t input_nr = 0;       // which input slot of `node` the gradient goes to
  bool valid() const { return node != nullptr; }
};

// A tensor saved for backward, with the storage version it had when saved. unpack() throws an
// mt::Error naming the op if the tensor was modified in place since.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t);  // NOLINT: implicit for brevity in op code
  Tensor unpack(const char* op_name) const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  // Gradients w.r.t. this node's outputs (undefined where none arrived) -> gradients w.r.t. its
  // inputs, one per next_edges entry (undefined where not needed).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr = 0;  // creation order; later nodes run first among ready ones
  bool released = false;
  // The module scope the forward op ran in (current_scope() at record time), kept only while
  // module_scopes_enabled(); "" otherwise.
  std::string scope;
};

// The node type that ops use: a name, a backward function and the edges to their inputs.
// The backward function receives the output gradients and returns one gradient per input.
class FunctionNode : public Node {
 public:
  using Backward = std::function<TensorList(const TensorList& grad_outputs)>;
  FunctionNode(const char* name, Backward backward) : name_(name), backward_(std::move(backward)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  std::string name() const override { return name_; }
  void release_saved() override { backward_ = nullptr; }

 private:
  const char* name_;
  Backward backward_;
};

// True when grad mode is on and any input requires grad: the op must record a node.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const TensorList& inputs);

// Connects `outputs` to a new FunctionNode whose inputs are `inputs` and marks the outputs as
// requiring grad. Call only when needs_grad() is true. Returns the node.
std::shared_ptr<Node> record(const char* name, const TensorList& inputs, const TensorList& outputs,
                             FunctionNode::Backward backward);
inline std::shared_ptr<Node> record(const char* name, const TensorList& inputs, const Tensor& output,
                                    FunctionNode::Backward backward) {
  return record(name, inputs, TensorList{output}, std::move(backward));
}

// The edge through which a gradient for `t` flows: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);

// Runs backward from `roots` with the given gradients (one per root).
void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph);
// True on a thread while it runs the engine (backward formulas, hooks): autocast is off there, so
// backward computes in the dtypes the forward chose even when called inside an autocast region.
bool in_backward();

// RAII for a forward pass run from inside a backward (activation checkpointing recomputes a segment
// there): for its scope grad mode is on and in_backward() is false, so the recomputed ops record a
// graph and autocast acts as in a forward; both come back on exit.
class ForwardInBackwardScope {
 public:
  ForwardInBackwardScope();
  ~ForwardInBackwardScope();
  ForwardInBackwardScope(const ForwardInBackwardScope&) = delete;
  ForwardInBackwardScope& operator=(const ForwardInBackwardScope&) = delete;

 private:
  int depth_;
  bool grad_mode_;
  memory::CategoryScope activations_{memory::Category::kActivations};  // what it recomputes is kept for backward
};

// ---- Observing ops: what the numerics monitor and the non-finite origin finder see.
//
// An observer is called for every recorded op right after its forward (from record(): the outputs
// are computed, so only ops that record a node are seen, i.e. ops on tensors requiring grad in grad
// mode) and for every node the engine runs in backward, after it returned its gradients. Observers
// run on the thread that runs the op, in registration order, and must not throw. While none is
// registered, record() and the engine pay one relaxed atomic load each.
struct OpEvent {
  const char* op;             // the node's name ("linear", "gelu", ...)
  bool backward;              // false: the op's forward; true: its backward node
  const std::string& scope;   // the module path the forward ran in ("" outside any scope)
  const TensorList& inputs;   // forward: the op's inputs; backward: the gradients arriving at its outputs
  const TensorList& outputs;  // forward: its outputs; backward: the gradients it returns for its inputs
};
using OpObserver = std::function<void(const OpEvent&)>;
uint64_t add_op_observer(OpObserver observer);
void remove_op_observer(uint64_t id);
bool has_op_observers();

// Module scopes, a thread-local stack of names: nn::Module::operator() pushes the module's scope
// name (its path in the model, set by nn::Module::set_scope_names) while module_scopes_enabled():
// while op observers are registered or a ModuleScopes lives (the Trainer holds one, so that the
// memory breakdown names the module at the peak). Nodes then keep their forward's scope.
class ModuleScopes {
 public:
  ModuleScopes();
  ~ModuleScopes();
  ModuleScopes(const ModuleScopes&) = delete;
  ModuleScopes& operator=(const ModuleScopes&) = delete;
};
bool module_scopes_enabled();

class ScopeGuard {
 public:
  explicit ScopeGuard(const std::string* name);  // nullptr: no scope pushed
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  bool pushed_ = false;
};
// The innermost scope's name, or "" when none.
const std::string& current_scope();

// Returns d(outputs)/d(inputs) . grad_outputs without touching .grad (like torch.autograd.grad).
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false);

}  // namespace autograd
}  // namespace mixtrain
