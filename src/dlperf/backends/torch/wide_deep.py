"""Wide & Deep in plain PyTorch, as OneFlow-Benchmark's WDL configures it (see
:mod:`dlperf.models`, ``wide-deep``): a wide embedding of size 1 summed over the cross features,
a deep embedding over the categorical fields concatenated with the dense ones through a ReLU MLP
with dropout, the two scores added into one logit. Both embeddings produce sparse gradients so
the optimizer updates only the rows a batch looked up (the "lazy Adam" of the reference), which
is what keeps the step time flat as the vocabulary grows.
"""

from typing import Any, Dict, List

import torch
from torch import nn

EMBEDDING_INIT = 0.05  # uniform(-0.05, 0.05), the reference's initializer
DROPOUT = 0.5


class WideAndDeep(nn.Module):
    def __init__(self, vocab_size, embedding_size, hidden_units, hidden_size, dense_fields,
                 deep_fields):
        # type: (int, int, int, int, int, int) -> None
        super(WideAndDeep, self).__init__()
        self.wide = nn.Embedding(vocab_size, 1, sparse=True)
        self.deep = nn.Embedding(vocab_size, embedding_size, sparse=True)
        for table in (self.wide, self.deep):
            nn.init.uniform_(table.weight, -EMBEDDING_INIT, EMBEDDING_INIT)
        layers = []  # type: List[nn.Module]
        width = deep_fields * embedding_size + dense_fields
        for _ in range(hidden_units):
            layers += [nn.Linear(width, hidden_size), nn.ReLU(), nn.Dropout(DROPOUT)]
            width = hidden_size
        layers.append(nn.Linear(width, 1))
        for layer in layers:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)  # glorot_uniform, as the reference
                nn.init.zeros_(layer.bias)
        self.mlp = nn.Sequential(*layers)

    def forward(self, dense, wide_ids, deep_ids):
        # type: (torch.Tensor, torch.Tensor, torch.Tensor) -> torch.Tensor
        wide_score = self.wide(wide_ids).sum(dim=(1, 2)).unsqueeze(1)
        deep_in = torch.cat([self.deep(deep_ids).flatten(1), dense], dim=1)
        return wide_score + self.mlp(deep_in)


class LazyAdam(object):
    """Adam on the dense parameters and SparseAdam on the embeddings (rows a batch touched),
    stepped together: one optimizer to the shared training step and to AMP's grad scaler."""

    def __init__(self, model, lr):
        # type: (WideAndDeep, float) -> None
        sparse = list(model.wide.parameters()) + list(model.deep.parameters())
        dense = list(model.mlp.parameters())
        self.parts = [torch.optim.SparseAdam(sparse, lr=lr), torch.optim.Adam(dense, lr=lr)]
        self.param_groups = [g for part in self.parts for g in part.param_groups]
        self.state = {}  # type: Dict[Any, Any]

    def zero_grad(self, set_to_none=True):
        # type: (bool) -> None
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        # type: (Any) -> None
        for part in self.parts:
            part.step()
