"""PyTorch definitions of mixtrain's named models (tools/mixtrain/models.h).

Each model has exactly the state_dict names and shapes of the mixtrain model of the same name, so a
mixtrain checkpoint loads with ``model.load_state_dict(tensors, strict=True)`` unchanged:

  mlp       Sequential: 1.*, 3.*, 5.*            (index 0 is Flatten, 2 and 4 are ReLU)
  mlp-wide  Sequential: 1.*, 3.*, 5.*
  cnn       Sequential: 0.*, 3.*, 7.*, 9.*
  gpt       tok_emb, pos_emb, blocks.{0..3}.{ln1, attn.qkv, attn.proj, ln2, mlp.0, mlp.2}, ln_f, head

The forward passes follow src/nn/*.cpp: for gpt the qkv projection is split as
``qkv(x).view(B, T, 3, H, D)`` (q, k, v are row blocks 0..C-1, C..2C-1, 2C..3C-1 of qkv.weight;
head h owns rows h*D..(h+1)*D-1 of each block), the attention is causal with scale 1/sqrt(D), the
MLP's GELU is the exact (erf) form and LayerNorm's eps is 1e-5, as in mixtrain.

``GPT(attention="mha")`` builds the same network on ``torch.nn.MultiheadAttention`` instead; its
keys are renamed with ``mixtrain_to_mha_keys`` (no transposes: the layouts are identical).

Plain Python 3 + torch >= 1.13 (Debian's python3-torch). Importing this file builds nothing.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_NAMES = ("mlp", "mlp-wide", "cnn", "gpt")

# GPTConfig defaults of include/mixtrain/nn/gpt.h.
GPT_VOCAB, GPT_CONTEXT, GPT_EMBED, GPT_LAYERS, GPT_HEADS, GPT_MLP_RATIO = 256, 128, 256, 4, 4, 4


def mlp(hidden=(512, 256)):
    h1, h2 = hidden
    return nn.Sequential(nn.Flatten(), nn.Linear(784, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(),
                         nn.Linear(h2, 10))


def mlp_wide():
    return mlp((1024, 1024))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class CausalSelfAttention(nn.Module):
    """mixtrain's nn::MultiheadAttention: submodules qkv = Linear(C, 3C) and proj = Linear(C, C)."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        assert embed_dim % num_heads == 0
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        B, T, C = x.shape
        H = self.num_heads
        D = C // H
        # [B, T, 3C] = [B, T, 3, H, D] -> [3, B, H, T, D], as src/nn/transformer.cpp does.
        qkv = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: by hand; query i sees keys j <= i
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
            o = att @ v
        o = o.transpose(1, 2).reshape(B, T, C)  # [B, H, T, D] -> [B, T, H, D] -> [B, T, C]
        return self.proj(o)


class Block(nn.Module):
    """mixtrain's nn::TransformerBlock: pre-norm, x + attn(ln1(x)), then h + mlp(ln2(h))."""

    def __init__(self, embed_dim, num_heads, mlp_ratio=GPT_MLP_RATIO, attention="manual"):
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dim, eps=1e-5)
        if attention == "manual":
            self.attn = CausalSelfAttention(embed_dim, num_heads)
        else:  # keys attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.* (see mixtrain_to_mha_keys)
            self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)
        self.ln2 = nn.LayerNorm(embed_dim, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_ratio * embed_dim), nn.GELU(),  # exact erf GELU
                                 nn.Linear(mlp_ratio * embed_dim, embed_dim))

    def forward(self, x):
        y = self.ln1(x)
        if isinstance(self.attn, nn.MultiheadAttention):
            T = x.shape[1]
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # True = masked
            y = self.attn(y, y, y, attn_mask=future, need_weights=False)[0]
        else:
            y = self.attn(y)
        h = x + y
        return h + self.mlp(self.ln2(h))


class GPT(nn.Module):
    """mixtrain's nn::GPT: int64 tokens [B, T] (T <= context) -> logits [B, T, vocab]; learned
    positions, no weight tying, head with bias."""

    def __init__(self, vocab_size=GPT_VOCAB, context=GPT_CONTEXT, embed_dim=GPT_EMBED, num_layers=GPT_LAYERS,
                 num_heads=GPT_HEADS, mlp_ratio=GPT_MLP_RATIO, attention="manual"):
        super().__init__()
        assert attention in ("manual", "mha")
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, embed_dim)
        self.pos_emb = nn.Embedding(context, embed_dim)
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio, attention) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(embed_dim, eps=1e-5)
        self.head = nn.Linear(embed_dim, vocab_size)

    def forward(self, tokens):
        T = tokens.shape[1]
        assert 1 <= T <= self.context, f"sequence length {T} must be in [1, {self.context}]"
        pos = torch.arange(T, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(pos)
        return self.head(self.ln_f(self.blocks(x)))


def mixtrain_to_mha_keys(state_dict):
    """Renames a mixtrain gpt state_dict for GPT(attention="mha") (torch.nn.MultiheadAttention):
    attn.qkv.{weight,bias} -> attn.in_proj_{weight,bias}, attn.proj.* -> attn.out_proj.*.
    The tensors are unchanged: both use the [q; k; v] row blocks with heads contiguous in each."""
    out = {}
    for name, t in state_dict.items():
        name = name.replace(".attn.qkv.weight", ".attn.in_proj_weight")
        name = name.replace(".attn.qkv.bias", ".attn.in_proj_bias")
        name = name.replace(".attn.proj.", ".attn.out_proj.")
        out[name] = t
    return out


def build_model(name, **kwargs):
    """The PyTorch model for a mixtrain model name ("mlp", "mlp-wide", "cnn", "gpt")."""
    if name == "mlp":
        return mlp()
    if name == "mlp-wide":
        return mlp_wide()
    if name == "cnn":
        return cnn()
    if name == "gpt":
        return GPT(**kwargs)
    raise ValueError(f"unknown model '{name}' (valid: {', '.join(MODEL_NAMES)})")


# Parameter counts of docs/nn.md's model table, checked by the verifier.
NUM_PARAMETERS = {"mlp": 535818, "mlp-wide": 1863690, "cnn": 421642, "gpt": 3323648}
