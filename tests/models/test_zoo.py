"""The reference models: faithful sizes, and each one measurable without allocating it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpufly.models import zoo  # noqa: E402
from gpufly.models.torch_factory import spec_from_factory  # noqa: E402

TORCHVISION_RESNET50_PARAMS = 25_557_032


def test_resnet50_has_torchvisions_parameter_count_on_meta_and_on_cpu() -> None:
    spec = spec_from_factory("gpufly.models.zoo:resnet50")
    real = zoo.resnet50()
    assert spec.params == TORCHVISION_RESNET50_PARAMS
    assert sum(p.numel() for p in real.parameters()) == TORCHVISION_RESNET50_PARAMS
    assert spec.kind == "cnn"
    assert spec.sample_shape == (3, 224, 224)
    assert spec.forward_flops_per_sample == pytest.approx(8.18e9, rel=0.01)


def test_resnet50_classes_change_only_the_head() -> None:
    with torch.device("meta"):
        model = zoo.resnet50(num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_RESNET50_PARAMS - 990 * 2049


def test_dlrm_builds_on_meta_and_runs_forward_and_backward_on_fake_tensors() -> None:
    spec = spec_from_factory("gpufly.models.zoo:dlrm", batch_size=4)
    assert spec.kind == "recsys"
    assert spec.embedding_params == sum(zoo.DLRM_TABLE_ROWS) * zoo.DLRM_EMBEDDING_DIM
    assert 100e6 < spec.params * 4 < 500e6
    assert spec.activation_bytes_per_sample > 0
    assert spec.sample_shape == (zoo.DLRM_DENSE_FEATURES,)
    assert set(spec.linear_params) == {f"{mlp}.{i}" for mlp in ("bottom_mlp", "top_mlp") for i in (0, 2, 4)}


def test_dlrm_example_inputs_are_multi_hot_bags() -> None:
    with torch.device("meta"):
        model = zoo.dlrm()
    dense, indices, offsets = model.example_inputs(3, torch.device("meta"))
    assert dense.shape == (3, zoo.DLRM_DENSE_FEATURES)
    assert indices.shape == (len(zoo.DLRM_TABLE_ROWS), 3 * zoo.DLRM_POOLING_FACTOR)
    assert offsets.shape == (len(zoo.DLRM_TABLE_ROWS), 3)
    assert model(dense, indices, offsets).shape == (3,)


def test_dlrm_table_sizes_stay_in_range() -> None:
    assert len(zoo.DLRM_TABLE_ROWS) == len(zoo.CRITEO_KAGGLE_ROWS) == 26
    assert all(1_000 <= rows <= 1_000_000 for rows in zoo.DLRM_TABLE_ROWS)
    assert tuple(max(1000, rows // 32) for rows in zoo.CRITEO_KAGGLE_ROWS) == zoo.DLRM_TABLE_ROWS


@pytest.mark.parametrize("name", ["small_cnn", "small_transformer"])
def test_small_models_train_a_step_on_cpu(name: str) -> None:
    torch.manual_seed(0)
    model = getattr(zoo, name)()
    output = model(*model.example_inputs(2, torch.device("cpu")))
    output.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_small_transformer_is_a_causal_decoder() -> None:
    torch.manual_seed(0)
    model = zoo.small_transformer().eval()
    (tokens,) = model.example_inputs(1, torch.device("cpu"))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1) % 1000
    with torch.no_grad():
        assert torch.allclose(model(tokens)[0, :-1], model(changed)[0, :-1], atol=1e-5)
    assert model(tokens).shape == (1, 64, 1000)
