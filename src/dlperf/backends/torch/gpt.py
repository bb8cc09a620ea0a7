"""GPT-2 style decoder in plain PyTorch, in the spirit of nanoGPT: learned token and position
embeddings, pre-LN blocks with fused-QKV causal self-attention (``F.scaled_dot_product_attention``
with ``is_causal``, so PyTorch picks its fused kernels) and a 4 x hidden GELU MLP, a final
LayerNorm and the language-model head tied to the token embeddings. Parameter count equals
:func:`dlperf.models` ``gpt``.
"""

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.models import GPT_MLP_RATIO

DROPOUT = 0.0  # GPT-2 pre-training used 0.1; nanoGPT and Megatron benchmarks run without


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        # type: (int, int) -> None
        super(CausalSelfAttention, self).__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        ctx = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True,
                                             dropout_p=DROPOUT if self.training else 0.0)
        return self.out(ctx.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        # type: (int, int) -> None
        super(Block, self).__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, GPT_MLP_RATIO * hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(GPT_MLP_RATIO * hidden, hidden))

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, hidden, layers, heads, max_positions):
        # type: (int, int, int, int, int) -> None
        super(GPT, self).__init__()
        self.tokens = nn.Embedding(vocab_size, hidden)
        self.positions = nn.Embedding(max_positions, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab_size, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2
        self.apply(self._init)

    @staticmethod
    def _init(module):
        # type: (nn.Module) -> None
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids):
        # type: (torch.Tensor) -> torch.Tensor
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def next_token_loss(logits, labels):
    # type: (torch.Tensor, torch.Tensor) -> torch.Tensor
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
