"""A ResNet-style image classifier on generated images, with a realistic per-image decode cost.

Images are stored as uint8 (as decoded JPEGs would be); ``__getitem__`` does what a torchvision
pipeline does per image: a random crop, a flip, conversion to float and normalization. The labels
follow a per-class colour tint (each class its own mix of three levels per channel), so a model can learn them
within the tuner's default 40 steps: two seeds of the baseline then agree on ``evaluate``, the accuracy on 1,024
held-out images (centre crop), and the tuner can judge a knob's accuracy by it. (With tints drawn at random, some
classes nearly alike, and SGD at lr 0.05, two seeds ended 55% and 51% accurate after 40 steps, their probe
losses 1.75 and 8.16: nothing a knob could be judged against.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from gpufly.tune.workload import Workload

TRAIN, HELD_OUT = 4096, 1024


def generated(count: int, size: int = 40, classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uint8 images (count, 3, size, size) and their labels: noise (0-95) over a colour per class whose
    channels are 0, 80 or 160 (the class number's digits in base 3), so no two classes share a colour."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=count)
    digits = np.arange(classes)[:, None] // np.array([1, 3, 9]) % 3
    tint = (80 * digits).reshape(classes, 3, 1, 1)
    return (rng.integers(0, 96, size=(count, 3, size, size)) + tint[labels]).astype(np.uint8), labels


class Images(torch.utils.data.Dataset):
    def __init__(self, pixels: np.ndarray, labels: np.ndarray, crop: int = 32) -> None:
        self.pixels, self.labels = pixels, labels
        self.crop, self.size = crop, pixels.shape[-1]

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


def accuracy(model: nn.Module, pixels: np.ndarray, labels: np.ndarray, crop: int = 32) -> float:
    """The share of ``pixels`` the model classifies right, centre-cropped and normalized as in training."""
    device = next(model.parameters()).device
    edge = (pixels.shape[-1] - crop) // 2
    right = 0
    for start in range(0, len(labels), 256):
        chunk = pixels[start:start + 256, :, edge:edge + crop, edge:edge + crop]
        images = (torch.from_numpy(np.ascontiguousarray(chunk)).float().div_(255) - 0.5) / 0.25
        predicted = model(images.to(device)).argmax(dim=1).cpu()
        right += int((predicted == torch.from_numpy(labels[start:start + 256])).sum())
    return right / len(labels)


def workload(options: dict[str, Any]) -> Workload:
    def loss(model: nn.Module, batch: Any) -> torch.Tensor:
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)

    pixels, labels = generated(TRAIN + HELD_OUT)
    return Workload(name="cnn", model=resnet(), dataset=Images(pixels[:TRAIN], labels[:TRAIN]), loss=loss,
                    batch_size=32, optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9),
                    evaluate=lambda m: accuracy(m, pixels[TRAIN:], labels[TRAIN:]))
