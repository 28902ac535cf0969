// mixtrain/nn/embedding.h: Embedding, a lookup table of learned vectors.
#pragma once

#include <cstdint>

#include "mixtrain/nn/module.h"
#include "mixtrain/random.h"

namespace mixtrain::nn {

struct EmbeddingOptions {
  Generator* generator = nullptr;  // for the initial values; nullptr: the process-wide generator
};

// indices (int64 or int32, any shape, values in [0, num_embeddings)) -> [..., embedding_dim] rows of
// "weight" [num_embeddings, embedding_dim] (fp32, initialised N(0, 1) as PyTorch). The gradient
// sums the rows of repeated indices.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions opts = {});
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }

 private:
  int64_t num_embeddings_, embedding_dim_;
  Tensor weight_;
};

}  // namespace mixtrain::nn
