// The backward engine: dependency counting over the graph reachable from the roots, then nodes run
// in an order where every node runs after all nodes that feed it gradients (ties broken by
// creation order, newest first, like PyTorch). Gradients arriving at the same input are summed.
// The pass runs with grad mode off: mixtrain does not build graphs of graphs.
#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <utility>

#include "mixtrain/autograd.h"
#include "core/views.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"

namespace mixtrain {

namespace {
thread_local bool grad_mode_enabled = true;
thread_local int backward_depth = 0;
std::atomic<uint64_t> next_sequence_nr{0};

// Op observers (Note [Op observers], docs/notes/op-observers.md): a registry under a mutex, and a
// count read without it on every op.
std::atomic<int> observer_count{0};
std::mutex observer_mutex;
std::vector<std::pair<uint64_t, autograd::OpObserver>>& observers() {
  static std::vector<std::pair<uint64_t, autograd::OpObserver>> list;
  return list;
}
uint64_t next_observer_id = 0;

void notify(const autograd::OpEvent& event) {
  std::vector<autograd::OpObserver> snapshot;
  {
    std::lock_guard<std::mutex> lock(observer_mutex);
    for (const auto& [id, fn] : observers()) snapshot.push_back(fn);
  }
  for (const auto& fn : snapshot) fn(event);
}

thread_local std::vector<const std::string*> scope_stack;

// Marks this thread as running the engine (autocast reads it: backward runs in the forward's dtypes).
struct BackwardScope {
  BackwardScope() { ++backward_depth; }
  ~BackwardScope() { --backward_depth; }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
};
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

namespace autograd {

bool in_backward() { return backward_depth > 0; }

uint64_t add_op_observer(OpObserver observer) {
  std::lock_guard<std::mutex> lock(observer_mutex);
  observers().emplace_back(next_observer_id, std::move(observer));
  observer_count.store(static_cast<int>(observers().size()), std::memory_order_relaxed);
  return next_observer_id++;
}

void remove_op_observer(uint64_t id) {
  std::lock_guard<std::mutex> lock(observer_mutex);
  std::erase_if(observers(), [id](const auto& entry) { return entry.first == id; });
  observer_count.store(static_cast<int>(observers().size()), std::memory_order_relaxed);
}

namespace {
std::atomic<int> module_scope_requests{0};
}  // namespace

ModuleScopes::ModuleScopes() { module_scope_requests.fetch_add(1, std::memory_order_relaxed); }
ModuleScopes::~ModuleScopes() { module_scope_requests.fetch_sub(1, std::memory_order_relaxed); }

bool module_scopes_enabled() {
  return has_op_observers() || module_scope_requests.load(std::memory_order_relaxed) > 0;
}

bool has_op_observers() { return observer_count.load(std::memory_order_relaxed) > 0; }

ScopeGuard::ScopeGuard(const std::string* name) : pushed_(name != nullptr) {
  if (pushed_) scope_stack.push_back(name);
}

ScopeGuard::~ScopeGuard() {
  if (pushed_) scope_stack.pop_back();
}

const std::string& current_scope() {
  static const std::string none;
  return scope_stack.empty() ? none : *scope_stack.back();
}

ForwardInBackwardScope::ForwardInBackwardScope() : depth_(backward_depth), grad_mode_(grad_mode_enabled) {
  backward_depth = 0;
  grad_mode_enabled = true;
}

ForwardInBackwardScope::~ForwardInBackwardScope() {
  backward_depth = depth_;
  grad_mode_enabled = grad_mode_;
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  // Saved detached: a node saving its own output must not own itself through grad_fn (a cycle).
  tensor_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const char* op_name) const {
  if (!tensor_.defined()) return tensor_;
  MT_CHECK(tensor_.version() == version_, "backward of ", op_name, ": a tensor ", describe(tensor_),
           " saved for the backward pass was modified by an in-place operation after it was saved (version ", version_,
           " when saved, now ", tensor_.version(), "); clone() it before modifying, or modify a copy");
  return tensor_;
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  MT_CHECK(backward_ != nullptr, "backward of ", name_,
           ": trying to backward through the graph a second time (its saved tensors were freed by the first "
           "backward); pass retain_graph=true to the first backward if you need to");
  return backward_(grad_outputs);
}

namespace {

// `g` added into the leaf gradient `grad` in place, as Tensor::add_ does it (the engine runs below the
// ops layer, so it runs the add kernel itself): a wider `g` is added in the wider type and rounded
// once into `grad`; a narrower one is widened first.
void add_into(Tensor& grad, const Tensor& g) {
  MT_CHECK(grad.device() == g.device(), "backward: gradients of one tensor on ", grad.device(), " and ", g.device());
  MT_CHECK(broadcast_shapes(grad.shape(), g.shape(), "backward") == grad.shape(), "backward: gradient ", describe(g),
           " does not broadcast to the accumulated ", describe(grad));
  const DType common = promote_types(grad.dtype(), g.dtype());
  const auto& add = kernels::binary_kernel(kernels::BinaryOp::kAdd);
  if (common != grad.dtype()) {
    Tensor sum = Tensor::empty(grad.shape(), common, grad.device());
    add(sum.device(), common)(sum, kernels::converted(grad, common), views::expand(g, grad.shape()), {1.0});
    kernels::copy(grad, sum);
  } else {
    Tensor o = kernels::converted(g, common);
    if (o.shares_storage(grad) && !o.is_same(grad)) o = kernels::clone(o);  // another view of the same memory
    add(grad.device(), common)(grad, grad, views::expand(o, grad.shape()), {1.0});
  }
  grad.bump_version();
}

// Accumulates an incoming gradient into a leaf's .grad, converted to the leaf's dtype.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  TensorList apply(TensorList&& grads) override {
    Tensor leaf(leaf_);
    Tensor g = std::move(grads[0]);
    grads.clear();
    if (!g.defined()) return {};
    Tensor existing = leaf.grad();
    if (!existing.defined()) {
      if (can_adopt(g, leaf)) {
        leaf.set_grad(g);
      } else {
        Tensor owned = g.dtype() == leaf.dtype() ? kernels::clone(g) : kernels::converted(g, leaf.dtype());
        leaf.set_grad(kernels::contiguous(owned));
      }
      memory::set_category(leaf.grad(), memory::Category::kGradients);
    } else {
      add_into(existing, g);
    }
    // Copied first: a hook may register or remove hooks.
    if (const AutogradMeta* m = leaf.impl().autograd.get(); m != nullptr && !m->post_accumulate_hooks.empty()) {
      const auto hooks = m->post_accumulate_hooks;
      for (const auto& [id, hook] : hooks) hook(leaf);
    }
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  // The first gradient of a leaf becomes its .grad without a copy when nothing else can see its
  // memory: `g` is the only handle to its TensorImpl (the engine moved its slot here; a gradient
  // handed to two slots, a user's grad_output or one kept by a node is shared) and that impl is
  // the only one over its storage (no view, saved tensor or cached copy aliases it). It must also
  // look like a fresh tensor of the leaf's shape and dtype: dense from the storage's start, and
  // free of autograd state.
  static bool can_adopt(const Tensor& g, const Tensor& leaf) {
    if (g.impl_ptr().use_count() != 1 || g.storage().use_count() != 1) return false;
    if (const AutogradMeta* m = g.impl().autograd.get(); m != nullptr && (m->requires_grad || m->grad_fn || m->grad))
      return false;
    return g.dtype() == leaf.dtype() && g.device() == leaf.device() && g.shape() == leaf.shape() &&
           g.storage_offset() == 0 && g.is_contiguous();
  }

  std::shared_ptr<TensorImpl> leaf_;
};

struct NodeState {
  int dependencies = 0;
  TensorList buffer;  // one slot per node output
};

struct ReadyOrder {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
  } else {
    // Out of place: a node may still reference either tensor. One pass instead of clone + add_,
    // the add kernel run as the add op runs it (promoted operands, broadcast views); the slot keeps
    // its dtype (a wider gradient is added in the wider type and rounded once).
    MT_CHECK(slot.device() == g.device(), "backward: gradients of one tensor on ", slot.device(), " and ", g.device());
    const DType wide = promote_types(slot.dtype(), g.dtype());
    const Shape shape = broadcast_shapes(slot.shape(), g.shape(), "backward");
    const Tensor a = kernels::converted(slot, wide), b = kernels::converted(g, wide);
    Tensor sum = Tensor::empty(shape, wide, slot.device());
    kernels::binary_kernel(kernels::BinaryOp::kAdd)(sum.device(), wide)(
        sum, views::expand(a, shape), views::expand(b, shape), {1.0});
    slot = kernels::converted(sum, slot.dtype());
  }
}

// Runs the engine. With `capture` non-empty, gradients arriving at the captured edges are returned
// instead of being accumulated into leaves, and AccumulateGrad nodes do not run.
TensorList execute(const TensorList& roots, const TensorList& grad_roots, bool retain_graph,
                   const std::vector<Edge>& capture) {
  NoGradGuard no_grad;
  // Backward formulas run in the dtypes the forward chose, even when backward() is called inside an
  // autocast region (see Note [Writing an op]): autocast is off while in_backward() is true.
  BackwardScope in_backward;
  // What the nodes return are gradients with respect to activations (AccumulateGrad relabels the
  // parameters' .grad).
  memory::CategoryScope gradients_in_flight(memory::Category::kActivationGradients);
  std::unordered_map<Node*, NodeState> state;
  std::vector<Node*> stack;
  std::vector<Edge> root_edges;
  for (const Tensor& r : roots) {
    MT_CHECK(r.requires_grad(), "backward: output ", describe(r), " does not require grad");
    root_edges.push_back(gradient_edge(r));
  }
  // Discover the graph and count how many edges point at each node.
  for (const Edge& e : root_edges) {
    if (state.emplace(e.node.get(), NodeState{}).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [it, inserted] = state.emplace(e.node.get(), NodeState{});
      it->second.dependencies++;
      if (inserted) stack.push_back(e.node.get());
    }
  }
  for (auto& [node, s] : state) s.buffer.resize(node->num_outputs);
  for (size_t i = 0; i < roots.size(); ++i) {
    Tensor g = kernels::converted(grad_roots[i], roots[i].dtype());
    accumulate(state[root_edges[i].node.get()].buffer[root_edges[i].input_nr], g);
  }

  std::unordered_map<Node*, std::vector<size_t>> captured_at;  // node -> capture indices
  for (size_t i = 0; i < capture.size(); ++i)
    if (capture[i].valid()) captured_at[capture[i].node.get()].push_back(i);
  TensorList captured(capture.size());

  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (auto& [node, s] : state)
    if (s.dependencies == 0) ready.push(node);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    NodeState& s = state[node];
    if (auto it = captured_at.find(node); it != captured_at.end()) {
      for (size_t ci : it->second) captured[ci] = s.buffer[capture[ci].input_nr];
    }
    const bool is_accumulator = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    if (is_accumulator && !capture.empty()) continue;
    const bool observed = !is_accumulator && has_op_observers();
    TensorList incoming;
    if (observed) incoming = s.buffer;  // handles only: the observers see what arrived
    const std::string name = node->name();
    TensorList grads;
    {
      const memory::OpScope op(name, &node->scope);  // the node's scratch: its temporaries
      grads = node->apply(std::move(s.buffer));
    }
    if (observed) notify({name.c_str(), true, node->scope, incoming, grads});
    s.buffer.clear();
    if (!retain_graph) node->release_saved();
    MT_INTERNAL_ASSERT(is_accumulator || grads.size() == node->next_edges.size(), "node ", node->name(), " returned ",
                       grads.size(), " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      NodeState& next = state[e.node.get()];
      if (i < grads.size()) accumulate(next.buffer[e.input_nr], grads[i]);
      if (--next.dependencies == 0) ready.push(e.node.get());
    }
  }
  return captured;
}

}  // namespace

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl().autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->sequence_nr = next_sequence_nr++;
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

std::shared_ptr<Node> record(const char* name, const TensorList& inputs, const TensorList& outputs,
                             FunctionNode::Backward backward) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->sequence_nr = next_sequence_nr++;
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& meta = outputs[i].impl().autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
  if (module_scopes_enabled()) node->scope = current_scope();
  if (has_op_observers()) notify({name, false, node->scope, inputs, outputs});
  return node;
}

void run_backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  execute(roots, grad_roots, retain_graph, {});
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph) {
  TensorList gs = grad_outputs;
  if (gs.empty()) {
    for (const Tensor& o : outputs) {
      MT_CHECK(o.numel() == 1, "grad: grad_outputs must be given for non-scalar output ", describe(o));
      Tensor one = Tensor::empty(o.shape(), o.dtype(), o.device());
      kernels::fill(one, 1.0);
      gs.push_back(one);
    }
  }
  MT_CHECK(gs.size() == outputs.size(), "grad: got ", gs.size(), " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Edge> capture;
  for (const Tensor& in : inputs) {
    MT_CHECK(in.requires_grad(), "grad: input ", describe(in), " does not require grad");
    capture.push_back(gradient_edge(in));
  }
  return execute(outputs, gs, retain_graph, capture);
}

}  // namespace autograd
}  // namespace mixtrain
