"""Every model trains a step on CPU; every data source yields batches of the right shape."""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from linkbench.config.groups import OptimizerConfig
from linkbench.config.layout import Layout
from linkbench.config.machine import Machine
from linkbench.config.scaling import scaled_lr
from linkbench.errors import ConfigError
from linkbench.parts.data import held_out_batches, make_batches
from linkbench.parts.flops import train_flops_per_sample
from linkbench.parts.models import build_model, cross_entropy
from linkbench.parts.optim import optimizer_class
from linkbench.parts.rank import Rank

from ..conftest import job_plan

CPU = torch.device("cpu")
OPTIMIZERS = {
    "sgd": OptimizerConfig("sgd", "torch.optim.SGD", {"momentum": 0.9}),
    "adamw": OptimizerConfig("adamw", "torch.optim.AdamW", {}),
}
BUILT_IN = ["tiny", "resnet18", "resnet50", "vit_b_16", "gpt"]


@pytest.mark.parametrize(
    ("model", "image_size"),
    [("tiny", 32), ("resnet18", 64), ("resnet50", 64), ("vit_b_16", 32), ("gpt", None)],
)
def test_every_model_takes_a_training_step(compose_config, tmp_path, model, image_size):
    overrides = [f"model={model}", "batch=2"]
    if model == "gpt":
        overrides += [
            "model.kwargs.n_layer=1", "model.kwargs.d_model=64", "model.kwargs.n_head=4",
            "model.seq_len=16",
        ]  # fmt: skip
    else:
        overrides += [f"data.image_size={image_size}"]
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    config = plan.config
    batches = make_batches(plan, 2, Rank(0, 0, 1, CPU))
    net = build_model(config.model, config.data.num_classes)
    inputs, targets = next(batches.stream)
    loss = cross_entropy(net(inputs), targets)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)


def test_synthetic_data_differs_between_ranks(compose_config, tmp_path):
    plan = job_plan(compose_config(), str(tmp_path), [], Machine(0))
    a, _ = next(make_batches(plan, 4, Rank(0, 0, 2, CPU)).stream)
    b, _ = next(make_batches(plan, 4, Rank(1, 1, 2, CPU)).stream)
    assert a.shape == (4, 3, 32, 32)
    assert not torch.equal(a, b)


def test_data_follows_the_data_parallel_rank_not_the_world(compose_config, tmp_path):
    """With 2 tensor-parallel ranks per replica on 4 ranks: the ranks of one replica take
    the same batches, the 2 replicas different ones (synthetic data by seed, a DataLoader's
    by its sampler's share), and the held-out split is shared by the replicas."""
    layout = Layout(4, tensor=2)
    ranks = [Rank(r, r, 4, CPU, layout) for r in range(4)]
    assert [(me.dp_rank, me.dp_size, me.holds_loss) for me in ranks] == [
        (0, 2, True), (0, 2, False), (1, 2, True), (1, 2, False),
    ]  # fmt: skip
    for overrides in (["batch=2"], ["batch=2", "data=fake", "data.size=8", "data.num_workers=0"]):
        plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
        config = plan.config
        first = [next(make_batches(plan, 2, me).stream)[0] for me in ranks]
        assert torch.equal(first[0], first[1]) and torch.equal(first[2], first[3])
        assert not torch.equal(first[0], first[2])
    held_out = [[x.sum().item() for x, _ in held_out_batches(plan, 4, me)] for me in ranks]
    assert held_out[0] == held_out[1] and held_out[2] == held_out[3]
    assert len(held_out[0]) + len(held_out[2]) == math.ceil(config.data.survey().held_out_size / 4)


def test_fake_data_shards_across_ranks(compose_config, tmp_path):
    overrides = ["data=fake", "data.size=8", "data.num_workers=0", "batch=2"]
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    streams = [make_batches(plan, 2, Rank(r, r, 2, CPU)).stream for r in (0, 1)]
    # One epoch: each rank's 2 batches of 2 are its half of the 8 images, none seen twice.
    epoch = [image for stream in streams for _ in range(2) for image in next(stream)[0]]
    assert len({image.numpy().tobytes() for image in epoch}) == 8
    shapes = {tuple(next(streams[1])[0].shape) for _ in range(3)}  # across the epoch boundary
    assert shapes == {(2, 3, 32, 32)}


def test_imagefolder_reads_class_folders(compose_config, tmp_path):
    for cls in ("cat", "dog", "eel"):
        (tmp_path / cls).mkdir()
        for i in range(2):
            Image.new("RGB", (40, 40), (i * 90, 10, 10)).save(tmp_path / cls / f"{i}.png")
    overrides = ["data=imagefolder", f"data.root={tmp_path}", "data.num_workers=0", "batch=2"]
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    config = plan.config
    batches = make_batches(plan, 2, Rank(0, 0, 1, CPU))
    images, labels = next(batches.stream)
    assert images.shape == (2, 3, 32, 32) and labels.shape == (2,)
    # The folder's 3 classes are the one count: the model's head and the FLOP count read it.
    assert config.data.num_classes == 3 and not plan.notes
    assert build_model(config.model, config.data.num_classes).head.out_features == 3
    told = job_plan(compose_config([*overrides, "data.num_classes=5"]), str(tmp_path),
                     ["data.num_classes=5"], Machine(0))  # fmt: skip
    assert told.config.data.num_classes == 3
    assert any("its 3 class folders are the classes" in note for note in told.notes)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"data.root=\S+/empty holds no class folders"):
        job_plan(compose_config(["data=imagefolder", f"data.root={empty}"]), "x", [], Machine(0))


def test_too_little_data_for_one_batch_is_refused_by_the_plan(compose_config, tmp_path):
    """Before any worker (before: a 24-line traceback from the ranks, data=digits batch=2000)."""
    (tmp_path / "only").mkdir()
    for i in range(6):
        Image.new("RGB", (8, 8)).save(tmp_path / "only" / f"{i}.png")
    overrides = ["data=imagefolder", f"data.root={tmp_path}", "data.num_workers=0", "batch=4"]
    with pytest.raises(ConfigError, match=r"2 data-parallel replica\(s\) 2 training samples, fewer "
                       r"than one batch of batch=4; lower batch \(at most 2\)"):  # fmt: skip
        job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))


def test_scaling_rules():
    assert scaled_lr(0.1, "linear", 1024, 256) == pytest.approx(0.4)
    assert scaled_lr(0.1, "sqrt", 1024, 256) == pytest.approx(0.2)
    assert scaled_lr(0.1, "none", 1024, 256) == pytest.approx(0.1)


def build_optimizer(net: torch.nn.Module, *args, **kwargs) -> torch.optim.Optimizer:
    """The optimizer a strategy builds over ``net``'s parameters."""
    cls, options = optimizer_class(*args, **kwargs)
    return cls(net.parameters(), **options)


@pytest.mark.slow  # about 40 s each on 2 cores; CI's slow part runs them
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_optimizer_survives_steps_the_grad_scaler_skips(optimizer):
    """fp16's first steps overflow and are skipped; no inf may leak into the optimizer state.

    This resnet18 case turned to NaN at the first applied step with fused SGD.
    """
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=1000)
    # device="cuda" asks for what linkbench builds on a GPU; the parameters stay on the CPU.
    opt = build_optimizer(
        net, OPTIMIZERS[optimizer], 0.1 * 4 / 256, 1e-4, torch.device("cuda"), grad_scaler=True
    )
    scaler = torch.amp.GradScaler("cpu")
    images, labels = torch.randn(4, 3, 64, 64), torch.randint(1000, (4,))
    losses = []
    for _ in range(5):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = cross_entropy(net(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert scaler.get_scale() < 65536.0, "the case must include skipped steps"
    assert all(torch.isfinite(torch.tensor(losses))), losses


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_gpu_optimizers_are_fused_without_a_grad_scaler_and_capturable_on_request(optimizer):
    net = torch.nn.Linear(4, 2)
    cfg = OPTIMIZERS[optimizer]
    cuda = torch.device("cuda")  # the parameters stay on the CPU; only the choice is checked
    plain = build_optimizer(net, cfg, 0.1, 0.0, cuda, grad_scaler=False)
    assert plain.defaults["fused"] is True
    assert isinstance(plain.param_groups[0]["lr"], float)
    cpu = build_optimizer(net, cfg, 0.1, 0.0, CPU, grad_scaler=False)
    assert not cpu.defaults["fused"]
    graphed = build_optimizer(net, cfg, 0.1, 0.0, CPU, grad_scaler=False, capturable=True)
    assert isinstance(graphed.param_groups[0]["lr"], torch.Tensor)


@pytest.mark.parametrize("model", BUILT_IN)
def test_flops_are_counted_at_every_models_smallest_input(compose_config, tmp_path, model):
    """At the smallest legal side (1 pixel, 16 for ViT-B/16's patches) and at 32 pixels, a
    CIFAR-sized first try, the last feature map is 1x1: BatchNorm in training mode still
    needs more than one value per channel, so the count must not fail."""

    def count(size: int) -> int:
        overrides = [f"model={model}", f"data.image_size={size}"]
        plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
        config = plan.config
        data = config.data
        return train_flops_per_sample(config.model, data.image_size, data.num_classes)

    smallest = compose_config([f"model={model}"]).model.image_size_multiple
    flops = {size: count(size) for size in (smallest, 32)}
    assert all(f > 0 for f in flops.values()), flops
    if model != "gpt":  # images: more pixels, more work
        assert flops[32] > flops[smallest]


def test_gpt_counts_its_own_flops_with_the_palm_formula(compose_config, tmp_path):
    overrides = ["model=gpt", "model.kwargs.n_layer=2", "model.kwargs.d_model=64",
                 "model.seq_len=16", "model.vocab_size=100"]  # fmt: skip
    model = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0)).config.model
    net = build_model(model)
    params = sum(p.numel() for p in net.parameters()) - 16 * 64
    assert train_flops_per_sample(model, 32, 10) == (6 * params + 12 * 2 * 64 * 16) * 16


def test_a_torchvision_model_by_name_is_one_override(compose_config, tmp_path):
    overrides = ["model=torchvision", "model.arch=mobilenet_v3_small", "data.image_size=32"]
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    config = plan.config
    net = build_model(config.model)
    assert config.model.name == "mobilenet_v3_small"
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 1000)
