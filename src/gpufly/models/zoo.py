"""Reference models written to be read and copied, each a factory gpufly can measure.

Every factory takes no required arguments and returns an ``nn.Module`` with
``example_inputs(batch_size, device)``: the convention of ``gpufly.models.torch_factory``, so
``gpufly fit gpufly.models.zoo:resnet50`` works, and so does your copy of it.

The classes live inside their factories only because gpufly never imports torch when it loads
a module (its start-up must stay fast without torch). In your own file, lift them to the top.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

CRITEO_KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                      27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
"""Distinct values of the 26 categorical features of the Criteo Kaggle display-ads data set,
as the DLRM reference code (facebookresearch/dlrm) reports them."""

DLRM_TABLE_ROWS = (1000, 1000, 316600, 68831, 1000, 1000, 1000, 1000, 1000, 2910, 1000, 260987, 1000,
                   1000, 1000, 170665, 1000, 1000, 1000, 1000, 220204, 1000, 1000, 8943, 1000, 4455)
"""Rows of dlrm()'s 26 tables: the Criteo layout hashed down, max(1000, rows // 32). About 1.07 M rows,
274 MB of fp32 tables at dimension 64, where the full Criteo Kaggle layout would take 8.6 GB."""

DLRM_DENSE_FEATURES = 13
DLRM_EMBEDDING_DIM = 64
DLRM_POOLING_FACTOR = 8
"""Indices per bag in dlrm()'s example inputs: multi-hot features, as in MLPerf's DLRM v2 data."""


def resnet50(num_classes: int = 1000) -> nn.Module:
    """ResNet-50 v1.5 (He et al. 2015; stride 2 in the 3x3 conv of a block, as torchvision does).

    25,557,032 parameters at 1000 classes, as torchvision's ``resnet50()``; inputs 3x224x224.
    """
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        """1x1 reduce, 3x3 (strided), 1x1 expand by 4, plus the shortcut; projected when shapes change."""

        expansion = 4

        def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
            super().__init__()
            out_channels = width * self.expansion
            self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
            self.bn3 = nn.BatchNorm2d(out_channels)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or in_channels != out_channels:
                self.downsample = nn.Sequential(
                    nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(out_channels),
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            out += identity
            return self.relu(out)

    class ResNet50(nn.Module):
        def __init__(self, num_classes: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            stages: list[nn.Module] = []
            in_channels = 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                stage = [Bottleneck(in_channels, width, stride)]
                in_channels = width * Bottleneck.expansion
                stage += [Bottleneck(in_channels, width) for _ in range(blocks - 1)]
                stages.append(nn.Sequential(*stage))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(in_channels, num_classes)
            for layer in self.modules():
                if isinstance(layer, nn.Conv2d):
                    nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

        def example_inputs(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
            return (torch.randn(batch_size, 3, 224, 224, device=device),)

    return ResNet50(num_classes)


def _mlp(sizes: tuple[int, ...], last_relu: bool) -> nn.Sequential:
    """Linear layers of ``sizes[i] -> sizes[i + 1]``, with ReLU between (and after the last, if asked)."""
    from torch import nn

    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(n_in, n_out))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def dlrm() -> nn.Module:
    """A DLRM-style recommender (Naumov et al. 2019, arXiv 1906.00091): a logit for BCEWithLogitsLoss.

    13 dense features through a bottom MLP 512-256-64; 26 sparse features, each pooled (sum) from
    its own ``nn.EmbeddingBag`` of dimension 64; the pairwise dot products of those 27 vectors,
    concatenated with the dense vector, through a top MLP 512-256-1.
    """
    import torch
    from torch import nn

    class DLRM(nn.Module):
        def __init__(self, table_rows: tuple[int, ...], dim: int) -> None:
            super().__init__()
            self.table_rows = table_rows
            self.bottom_mlp = _mlp((DLRM_DENSE_FEATURES, 512, 256, dim), last_relu=True)
            self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for rows in table_rows)
            vectors = len(table_rows) + 1
            self.top_mlp = _mlp((dim + vectors * (vectors - 1) // 2, 512, 256, 1), last_relu=False)

        def interact(self, dense: torch.Tensor, pooled: list[torch.Tensor]) -> torch.Tensor:
            """The dense vector, then the dot products of all pairs of vectors (the strict lower triangle)."""
            vectors = torch.stack([dense, *pooled], dim=1)
            dots = torch.bmm(vectors, vectors.transpose(1, 2))
            count = vectors.shape[1]
            rows, cols = torch.tril_indices(count, count, offset=-1, device=dense.device)
            return torch.cat([dense, dots[:, rows, cols]], dim=1)

        def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            """``indices[t]`` holds table t's ids, bag after bag; ``offsets[t]`` where each bag starts."""
            x = self.bottom_mlp(dense)
            pooled = [table(indices[t], offsets[t]) for t, table in enumerate(self.tables)]
            return self.top_mlp(self.interact(x, pooled)).squeeze(1)

        def example_inputs(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
            bag = DLRM_POOLING_FACTOR
            dense = torch.randn(batch_size, DLRM_DENSE_FEATURES, device=device)
            indices = torch.stack([torch.randint(0, rows, (batch_size * bag,), device=device)
                                   for rows in self.table_rows])
            offsets = torch.arange(0, batch_size * bag, bag, device=device).expand(len(self.table_rows), -1)
            return dense, indices, offsets

    return DLRM(DLRM_TABLE_ROWS, DLRM_EMBEDDING_DIM)


def small_cnn() -> nn.Module:
    """Three conv-BN-ReLU stages and a linear classifier on 3x32x32 inputs: a fast model for tests."""
    import torch
    from torch import nn

    def stage(n_in: int, n_out: int) -> list[nn.Module]:
        conv = nn.Conv2d(n_in, n_out, kernel_size=3, padding=1, bias=False)
        return [conv, nn.BatchNorm2d(n_out), nn.ReLU(inplace=True)]

    class SmallCNN(nn.Sequential):
        def __init__(self) -> None:
            super().__init__(*stage(3, 16), nn.MaxPool2d(2), *stage(16, 32), nn.MaxPool2d(2), *stage(32, 64),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

        def example_inputs(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
            return (torch.randn(batch_size, 3, 32, 32, device=device),)

    return SmallCNN()


def small_transformer(vocab: int = 1000, seq: int = 64, hidden: int = 128, heads: int = 4,
                      layers: int = 2) -> nn.Module:
    """A GPT-style decoder (pre-norm, causal attention, GELU MLP, tied output head): fast, for tests."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm = nn.LayerNorm(hidden)
            self.qkv_proj = nn.Linear(hidden, 3 * hidden)
            self.out_proj = nn.Linear(hidden, hidden)
            self.mlp_norm = nn.LayerNorm(hidden)
            self.up_proj = nn.Linear(hidden, 4 * hidden)
            self.down_proj = nn.Linear(4 * hidden, hidden)

        def attention(self, x: torch.Tensor) -> torch.Tensor:
            batch, tokens, _ = x.shape
            q, k, v = self.qkv_proj(x).view(batch, tokens, 3, heads, hidden // heads).unbind(2)
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True)
            return self.out_proj(out.transpose(1, 2).reshape(batch, tokens, hidden))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attention(self.attn_norm(x))
            return x + self.down_proj(F.gelu(self.up_proj(self.mlp_norm(x))))

    class SmallTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embed = nn.Embedding(vocab, hidden)
            self.pos_embed = nn.Embedding(seq, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.tok_embed.weight

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.tok_embed(tokens) + self.pos_embed(positions)
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.norm(x))

        def example_inputs(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
            return (torch.randint(0, vocab, (batch_size, seq), device=device),)

    return SmallTransformer()
