"""The face model's classifier sharded over the ranks of a multi-process job, as InsightFace's
Partial FC (arcface_torch ``partial_fc.py``) does it: model parallel for the class centres, data
parallel (DDP) for the backbone.

Rank r of W holds the centres of classes ``[r * C // W, (r + 1) * C // W)``. Each step:

1. every rank's embeddings (and labels) are all-gathered, so each rank sees the global batch;
2. each rank samples its Partial FC centres: every class of the *global* batch that falls in its
   shard, then random others up to ``partial_fc`` percent of the shard;
3. each rank computes the ArcFace logits of the global batch against its sampled centres, and the
   softmax over the full class set takes a distributed max and sum (all_reduce), so the loss,
   identical on every rank, is the one a single process computes over the global batch;
4. backward: the softmax gradient of the local columns needs no communication; the embedding
   gradient, a partial sum on each rank, is all-reduced and each rank keeps its own rows.

The centres' gradients are each rank's own (DDP must ignore them); the backbone's gradients are
averaged by DDP as usual, so the embedding gradient is multiplied by W on the way back (as
InsightFace's ``AllGatherFunc`` does) to make that average the gradient of the global loss.
"""

from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import nn

from dlperf.backends.torch.arcface import ARC_SCALE, arc_margin, cosines, sample_classes


def shard_bounds(num_classes, world, rank):
    # type: (int, int, int) -> Tuple[int, int]
    """[start, stop) of rank's classes: contiguous, sizes differ by at most one."""
    return rank * num_classes // world, (rank + 1) * num_classes // world


class AllGather(torch.autograd.Function):
    """Concatenate every rank's rows (equal counts); backward sums the gradient over the ranks
    and hands each rank its own rows, times ``scale``."""

    @staticmethod
    def forward(ctx, tensor, scale, group):
        # type: (Any, torch.Tensor, float, Any) -> torch.Tensor
        tensor = tensor.contiguous()
        pieces = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(pieces, tensor, group=group)
        ctx.rows, ctx.rank, ctx.scale, ctx.group = (tensor.shape[0], dist.get_rank(group),
                                                    scale, group)
        return torch.cat(pieces)

    @staticmethod
    def backward(ctx, grad):
        # type: (Any, torch.Tensor) -> Tuple[torch.Tensor, None, None]
        total = grad.contiguous().clone()
        dist.all_reduce(total, group=ctx.group)
        mine = total[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]
        return mine * ctx.scale if ctx.scale != 1 else mine, None, None


def all_gather_rows(tensor, scale=1.0, group=None):
    # type: (torch.Tensor, float, Optional[Any]) -> torch.Tensor
    return AllGather.apply(tensor, scale, group)


class DistCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of the global batch when each rank holds some columns of the logits.

    ``target`` is the label's column in this rank's logits, -1 where another rank holds it.
    Forward: the row max and the sum of exponentials are all-reduced (max, sum), and so is the
    label's logit; backward is the local softmax minus the one-hot, over the batch: no traffic.
    """

    @staticmethod
    def forward(ctx, logits, target, group):
        # type: (Any, torch.Tensor, torch.Tensor, Any) -> torch.Tensor
        n = logits.shape[0]
        top = logits.max(dim=1, keepdim=True).values
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        prob = (logits - top).exp_()
        total = prob.sum(dim=1, keepdim=True)
        dist.all_reduce(total, group=group)
        rows = (target >= 0).nonzero().squeeze(1)
        picked = torch.zeros(n, 1, dtype=logits.dtype, device=logits.device)
        picked[rows, 0] = logits[rows, target[rows]] - top[rows, 0]
        dist.all_reduce(picked, group=group)
        prob.div_(total)
        ctx.save_for_backward(prob, target)
        return (total.log() - picked).mean()

    @staticmethod
    def backward(ctx, grad):
        # type: (Any, torch.Tensor) -> Tuple[torch.Tensor, None, None]
        prob, target = ctx.saved_tensors
        rows = (target >= 0).nonzero().squeeze(1)
        out = prob.clone()
        out[rows, target[rows]] -= 1.0
        return out.mul_(grad / prob.shape[0]), None, None


class ShardedPartialFC(nn.Module):
    """This rank's slice of the class centres and the margin loss of the global batch."""

    sharded = True

    def __init__(self, num_classes, embedding_size, percent, generator, world, rank, group=None,
                 grad_scale=None):
        # type: (int, int, int, torch.Generator, int, int, Optional[Any], Optional[float]) -> None
        super(ShardedPartialFC, self).__init__()
        if num_classes < world:
            raise ValueError("a classifier of %d classes cannot be sharded over %d ranks"
                             % (num_classes, world))
        self.num_classes, self.world, self.rank = num_classes, world, rank
        self.start, self.stop = shard_bounds(num_classes, world, rank)
        self.num_local = self.stop - self.start
        self.percent = percent
        self.sampled = max(1, self.num_local * percent // 100)
        # each shard draws its own centres (a whole matrix would cost every rank all of them)
        init = torch.Generator().manual_seed(torch.initial_seed() + 1000003 * (rank + 1))
        self.weight = nn.Parameter(
            torch.empty(self.num_local, embedding_size).normal_(0, 0.01, generator=init))
        self.generator = generator
        self.group = group
        # DDP averages the backbone's gradients over the ranks: undo it on the embeddings
        self.grad_scale = float(world if grad_scale is None else grad_scale)

    def sample(self, labels):
        # type: (torch.Tensor) -> Tuple[Optional[torch.Tensor], torch.Tensor]
        """(this shard's centres to compute, or None for all; each global label's column among
        them, -1 where another shard holds the label)."""
        local = labels - self.start
        mine = (local >= 0) & (local < self.num_local)
        index, positions = sample_classes(local[mine], self.num_local, self.sampled,
                                          self.generator)
        target = torch.full_like(labels, -1)
        target[mine] = positions
        return index, target

    def forward(self, embeddings, labels):
        # type: (torch.Tensor, torch.Tensor) -> torch.Tensor
        everyone = all_gather_rows(embeddings, self.grad_scale, self.group)
        with torch.no_grad():
            all_labels = all_gather_rows(labels, 1.0, self.group)
        index, target = self.sample(all_labels)
        centres = self.weight if index is None else self.weight[index]
        cos = cosines(everyone, centres)
        rows = (target >= 0).nonzero().squeeze(1)
        cols = target[rows]
        logits = ARC_SCALE * cos.index_put((rows, cols), arc_margin(cos[rows, cols]))
        # fp32 softmax whatever autocast made of the cosines, as F.cross_entropy's under autocast
        return DistCrossEntropy.apply(logits.float(), target, self.group)

    def info(self):
        # type: () -> Dict[str, Any]
        low, high = self.num_classes // self.world, -(-self.num_classes // self.world)
        each = "%d" % low if low == high else "%d to %d" % (low, high)
        return {
            "classifier": "sharded over %d ranks, %s classes each" % (self.world, each),
            "classifier_classes": [self.start, self.stop],  # this rank's [start, stop)
            "classifier_params_per_rank": self.weight.numel(),
            "classifier_sampled_per_rank": min(self.sampled, self.num_local),
        }
