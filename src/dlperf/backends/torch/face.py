"""InsightFace's ResNet-50 (iresnet50) and an ArcFace classifier with Partial FC, in plain
PyTorch; the network :mod:`dlperf.models` ``face-resnet50`` describes.

Partial FC (An et al. 2022): each step computes logits for a sample of the class centres only,
every class of the batch plus random others up to ``partial_fc`` percent, so the softmax over
millions of identities costs a fraction; the centres not sampled get no gradient.
"""

import torch
import torch.nn.functional as F
from torch import nn

from dlperf.backends.torch.arcface import arcface_logits, sample_classes
from dlperf.backends.torch.face_parallel import ShardedPartialFC
from dlperf.models import FACE_STAGES, FACE_STEM

BN_EPS = 1e-5


class IBasicBlock(nn.Module):
    def __init__(self, c_in, width, stride):
        # type: (int, int, int) -> None
        super(IBasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(c_in, eps=BN_EPS)
        self.conv1 = nn.Conv2d(c_in, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.prelu = nn.PReLU(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width, eps=BN_EPS)
        self.downsample = None if stride == 1 and c_in == width else nn.Sequential(
            nn.Conv2d(c_in, width, 1, stride, bias=False), nn.BatchNorm2d(width, eps=BN_EPS))

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        return out + (x if self.downsample is None else self.downsample(x))


class IResNet50(nn.Module):
    def __init__(self, image_size, embedding_size):
        # type: (int, int) -> None
        super(IResNet50, self).__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, FACE_STEM, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(FACE_STEM, eps=BN_EPS), nn.PReLU(FACE_STEM))
        blocks, c_in = [], FACE_STEM
        for width, count in FACE_STAGES:
            for block in range(count):
                blocks.append(IBasicBlock(c_in, width, 2 if block == 0 else 1))
                c_in = width
        self.body = nn.Sequential(*blocks)
        self.bn2 = nn.BatchNorm2d(c_in, eps=BN_EPS)
        side = image_size // 16
        self.fc = nn.Linear(c_in * side * side, embedding_size)
        self.features = nn.BatchNorm1d(embedding_size, eps=BN_EPS)
        nn.init.constant_(self.features.weight, 1.0)
        self.features.weight.requires_grad = False  # as InsightFace: a frozen scale

    def forward(self, x):
        # type: (torch.Tensor) -> torch.Tensor
        x = self.bn2(self.body(self.stem(x)))
        return self.features(self.fc(torch.flatten(x, 1)))


class PartialFC(nn.Module):
    """The class centres and the margin loss over a sample of them."""

    def __init__(self, num_classes, embedding_size, percent, generator):
        # type: (int, int, int, torch.Generator) -> None
        super(PartialFC, self).__init__()
        self.num_classes = num_classes
        self.sampled = max(1, num_classes * percent // 100)
        self.weight = nn.Parameter(torch.empty(num_classes, embedding_size).normal_(0, 0.01))
        self.generator = generator

    def forward(self, embeddings, labels):
        # type: (torch.Tensor, torch.Tensor) -> torch.Tensor
        index, local = sample_classes(labels, self.num_classes, self.sampled, self.generator)
        centres = self.weight if index is None else self.weight[index]
        return F.cross_entropy(arcface_logits(embeddings, centres, local), local)


class FaceModel(nn.Module):
    """The backbone and its classifier. With ``world`` > 1 the classifier is sharded over the
    ranks (:class:`~dlperf.backends.torch.face_parallel.ShardedPartialFC`): rank ``rank`` holds
    its slice of the class centres, which DDP must not all-reduce (see ``ddp_ignored``)."""

    def __init__(self, image_size, embedding_size, num_classes, percent, generator, world=1,
                 rank=0):
        # type: (int, int, int, int, torch.Generator, int, int) -> None
        super(FaceModel, self).__init__()
        self.backbone = IResNet50(image_size, embedding_size)
        if world > 1:
            self.head = ShardedPartialFC(num_classes, embedding_size, percent, generator, world,
                                         rank)  # type: nn.Module
        else:
            self.head = PartialFC(num_classes, embedding_size, percent, generator)
        self.num_classes = num_classes
        self.embedding_size = embedding_size

    def forward(self, images, labels):
        # type: (torch.Tensor, torch.Tensor) -> torch.Tensor
        return self.head(self.backbone(images), labels)

    def embedder(self):
        # type: () -> FaceEmbedder
        """The model as inference serves it: images in, embeddings out."""
        return FaceEmbedder(self)

    def ddp_ignored(self):
        # type: () -> list
        """Names of the parameters DDP must leave alone: a sharded classifier's own centres."""
        return ["head.weight"] if getattr(self.head, "sharded", False) else []

    def whole_params(self):
        # type: () -> int
        """Trainable parameters of the whole model, every rank's classifier shard included
        (the catalogue's count), whatever slice of the centres this process holds."""
        backbone = sum(p.numel() for p in self.backbone.parameters() if p.requires_grad)
        return backbone + self.num_classes * self.embedding_size

    def classifier_info(self):
        # type: () -> dict
        head = self.head
        if not getattr(head, "sharded", False):
            return {"classifier": "whole, %d classes" % self.num_classes}
        return head.info()


class FaceEmbedder(nn.Module):
    """Inference of a face model: the backbone's embeddings, what a face recogniser serves (the
    classifier is training's). Its own ``forward``, so that the inference wrappers (the whole
    model cast to bf16/fp16, int8 quantization's tracing) see the same call as the loop."""

    def __init__(self, model):
        # type: (FaceModel) -> None
        super(FaceEmbedder, self).__init__()
        self.model = model

    def forward(self, images):
        # type: (torch.Tensor) -> torch.Tensor
        return self.model.backbone(images)

    def whole_params(self):
        # type: () -> int
        return self.model.whole_params()
