"""A ResNet-style image classifier on generated images, with a realistic per-image decode cost.

Images are stored as uint8 (as decoded JPEGs would be); ``__getitem__`` does what a torchvision
pipeline does per image: a random crop, a flip, conversion to float and normalization. The labels
follow a per-class colour tint, so the loss can fall.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from gpufly.tune.workload import Workload


class Images(torch.utils.data.Dataset):
    def __init__(self, count: int = 4096, size: int = 40, crop: int = 32, classes: int = 10, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, classes, size=count)
        tint = rng.integers(0, 80, size=(classes, 3, 1, 1))
        self.pixels = (rng.integers(0, 176, size=(count, 3, size, size)) + tint[self.labels]).astype(np.uint8)
        self.crop, self.size = crop, size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)  # the same crop for the same image in every trial
        y, x = rng.integers(0, self.size - self.crop + 1, size=2)
        image = self.pixels[i, :, y:y + self.crop, x:x + self.crop]
        if rng.random() < 0.5:
            image = image[:, :, ::-1]
        tensor = torch.from_numpy(np.ascontiguousarray(image)).float().div_(255)
        return (tensor - 0.5) / 0.25, int(self.labels[i])


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                                  nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def resnet(classes: int = 10, width: int = 32) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         Block(width), nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), Block(2 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))


def workload(options: dict[str, Any]) -> Workload:
    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)

    return Workload(name="cnn", model=resnet(), dataset=Images(), loss=loss, batch_size=32,
                    optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9))
