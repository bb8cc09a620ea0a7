"""ArcFace's additive angular margin and Partial FC's class sampling, in plain PyTorch: the
math both the whole classifier (:mod:`.face`) and the one sharded over the ranks
(:mod:`.face_parallel`) compute with.
"""

import math

import torch
import torch.nn.functional as F

ARC_SCALE = 64.0
ARC_MARGIN = 0.5


def sample_classes(labels, num_classes, sampled, generator):
    # type: (torch.Tensor, int, int, torch.Generator) -> tuple
    """(class indices to compute, the batch's labels as positions among them): every positive,
    then random negatives up to ``sampled`` in all (Partial FC's sampling)."""
    positives = torch.unique(labels)
    if sampled >= num_classes:
        return None, labels
    scores = torch.rand(num_classes, device=labels.device, generator=generator)
    scores[positives] = 2.0  # positives first
    index = torch.topk(scores, max(sampled, positives.numel()), sorted=True).indices.sort().values
    return index, torch.searchsorted(index, labels)


def arc_margin(target):
    # type: (torch.Tensor) -> torch.Tensor
    """cos(theta + m) of the label's cos(theta), with InsightFace's fallback
    cos(theta) - sin(pi - m) * m where theta + m would pass pi (unscaled)."""
    sin = torch.sqrt((1.0 - target * target).clamp_min(0.0))
    with_margin = target * math.cos(ARC_MARGIN) - sin * math.sin(ARC_MARGIN)
    threshold = math.cos(math.pi - ARC_MARGIN)
    return torch.where(target > threshold, with_margin,
                       target - math.sin(math.pi - ARC_MARGIN) * ARC_MARGIN)


def cosines(embeddings, centres):
    # type: (torch.Tensor, torch.Tensor) -> torch.Tensor
    """cos(theta) of every embedding with every centre, both normalised, in fp32."""
    return F.linear(F.normalize(embeddings.float()), F.normalize(centres.float())).clamp(-1, 1)


def arcface_logits(embeddings, centres, labels):
    # type: (torch.Tensor, torch.Tensor, torch.Tensor) -> torch.Tensor
    """s * cos(theta + m) at the label, s * cos(theta) elsewhere (InsightFace's ArcFace, with
    its fallback cos(theta) - sin(pi - m) * m where theta + m would pass pi)."""
    cos = cosines(embeddings, centres)
    with_margin = arc_margin(cos.gather(1, labels[:, None]))
    return ARC_SCALE * cos.scatter(1, labels[:, None], with_margin)
