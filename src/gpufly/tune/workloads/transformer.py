"""A small GPT-style language model on generated token sequences (a repeating pattern plus noise)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gpufly.tune.workload import Workload


class Tokens(torch.utils.data.Dataset):
    def __init__(self, count: int = 2048, length: int = 128, vocab: int = 512, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        period = torch.randint(2, 9, (count, 1), generator=generator)
        start = torch.randint(0, vocab, (count, 1), generator=generator)
        positions = torch.arange(length + 1)[None, :]
        self.data = (start + positions % period * 7) % vocab

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]


class GPT(nn.Module):
    mask: torch.Tensor
    """The causal mask, a buffer (so it moves with the model)."""

    def __init__(self, vocab: int = 512, dim: int = 128, layers: int = 2, heads: int = 4, length: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(1, length, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        return self.head(self.blocks(x, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True))


def workload(options: dict[str, Any]) -> Workload:
    def loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        logits = model(batch[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    return Workload(name="transformer", model=GPT(), dataset=Tokens(), loss=loss, batch_size=16, unit="tokens",
                    items=lambda batch: int(batch[:, 1:].numel()),
                    optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=3e-4))
