"""An emulated cluster on one box (``interconnect.nodes``): the ranks of a node share its
namespace, the nodes meet through shaped uplinks, and each strategy's bytes through every
uplink, predicted from the calls it makes and gloo's algorithms, are what the uplink's own
counters saw (known answer 1 of the cluster: within 5 %); the step time is what the bytes
over both link classes predict (2), the strategies fall in the order of their bytes (3), and
a topology not run is predicted from two that were (4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from linkbench.analysis.emulated import HOLDS, LinkRow, link_rows
from linkbench.analysis.sweep import group, load_sweep, swept_keys
from linkbench.config.machine import Machine
from linkbench.launcher.planning import plan_job
from linkbench.link import netns
from linkbench.link.emulated import payload_gb_s

from ..conftest import run_cli
from . import assert_holds_what_it_states

PROBLEM = netns.emulation_problem(delay=False)
needs_namespaces = pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))
CLUSTER = ["interconnect=emulated", "interconnect.nodes=2", "devices=4"]


def test_hsdp_takes_one_replica_per_node(compose_config):
    config = compose_config([*CLUSTER, "strategy=hsdp"])
    plan = plan_job(config, "x", [], Machine(cuda_devices=0))
    assert plan.config.strategy.replicas == 2, "resolved from the nodes, recorded as run"
    given = compose_config([*CLUSTER, "devices=8", "strategy=hsdp", "strategy.replicas=4"])
    assert plan_job(given, "x", [], Machine(cuda_devices=0)).config.strategy.replicas == 4


@pytest.mark.slow
@needs_namespaces
def test_each_strategy_sends_through_the_uplinks_what_its_calls_predict(tmp_path):
    """2 nodes x 2 ranks, resnet18's 46.8 MB of gradients: DDP 1.5x them through each
    uplink, FSDP on gloo 3x, HSDP 1x; the counters agree within 5 % (measured: 0.2-0.3 %)."""
    sweep = tmp_path / "sweep"
    args = [*CLUSTER, "model=resnet18", "model.image_size=32", "batch=4", "steps=6",
            "untimed_steps=2", "log_every=2", "task.no_sync_steps=2", "eval.enabled=false",
            "repeats=1", "interconnect.rate_gbit_s=2", "profile=trace"]  # fmt: skip
    done = run_cli(["-m", *args, "strategy=ddp,fsdp,hsdp", f"hydra.sweep.dir={sweep}"], 600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = {}
    for result_file in sweep.glob("*/result.json"):
        result = json.loads(result_file.read_text())
        per_step = result["link"]["per_step"]
        assert result["transport"]["verified"], result["transport"]
        for uplink in per_step["uplinks"]:
            for way in ("tx", "rx"):
                seen = uplink[f"{way}_bytes_per_step"]
                predicted = uplink[f"predicted_{way}_bytes_per_step"]
                assert abs(seen / predicted - 1) < 0.05, (per_step["strategy"], uplink)
        found[per_step["strategy"]] = result["metrics"]["uplink_bytes_per_step_predicted"]
    grads = 46_758_048
    assert found == pytest.approx({"ddp": 1.5 * grads, "fsdp": 3 * grads, "hsdp": grads}, 0.01)
    summary = (sweep / "summary.md").read_text()
    table = summary.split("## Emulated links: measured against the bytes")[1]
    assert "| hsdp | 2 x 2 | 2 | 46.758 |" in table, table[:2000]


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize(
    ("compression", "times_grads"),
    [
        (["strategy=ddp", "strategy/comm_hook=fp16"], 0.75),
        (["strategy=hsdp", "strategy.reduce_dtype=bfloat16"], 0.5),
    ],
)
def test_compression_halves_what_crosses_the_slow_link(tmp_path, compression, times_grads):
    """Known answer 5's bytes: DDP's fp16 hook all-reduces half the bytes (0.75 B through each
    uplink instead of 1.5 B); HSDP reducing in bf16 all-reduces half-size shards across the
    nodes (0.5 B instead of B). The counters see it within 5 %."""
    job = tmp_path / "job"
    args = [*CLUSTER, "model=resnet18", "model.image_size=32", "batch=4", "steps=4",
            "untimed_steps=2", "log_every=2", "task.no_sync_steps=0", "eval.enabled=false",
            "interconnect.rate_gbit_s=2", *compression, f"hydra.run.dir={job}"]  # fmt: skip
    done = run_cli(args, 300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((job / "result.json").read_text())
    predicted = result["metrics"]["uplink_bytes_per_step_predicted"]
    assert predicted == pytest.approx(times_grads * 46_758_048, rel=0.01)
    for uplink in result["link"]["per_step"]["uplinks"]:
        seen, expected = uplink["tx_bytes_per_step"], uplink["predicted_tx_bytes_per_step"]
        assert abs(seen / expected - 1) < 0.05, uplink


RATE_GBIT_S = 0.25
SLOW_LINK = [*CLUSTER[:1], "model=resnet18", "model.image_size=32", "batch=4", "steps=6",
             "untimed_steps=2", "log_every=2", "task.no_sync_steps=0", "eval.enabled=false",
             f"interconnect.rate_gbit_s={RATE_GBIT_S}"]  # fmt: skip


@pytest.fixture(scope="module")
def slow_link(tmp_path_factory) -> dict[str, Path]:
    """On 0.25 Gbit/s, traced: the three strategies on 2 nodes x 2 ranks (two runs each: the
    inputs' spread) and DDP with fp16
    compression, DDP on 2 nodes x 1 rank (the link between nodes) and on 1 node x 2 ranks
    (the path inside one)."""
    if PROBLEM is not None:
        pytest.skip(str(PROBLEM))
    root = tmp_path_factory.mktemp("slow_link")
    runs = {
        "cluster": ["-m", *SLOW_LINK, "interconnect.nodes=2", "devices=4", "profile=trace",
                    "strategy=ddp,fsdp,hsdp", "repeats=2", f"hydra.sweep.dir={root / 'cluster'}"],
        "fp16": ["-m", *SLOW_LINK, "interconnect.nodes=2", "devices=4", "profile=trace",
                 "strategy=ddp", "strategy/comm_hook=fp16", "repeats=1",
                 f"hydra.sweep.dir={root / 'fp16'}"],
        "between": [*SLOW_LINK, "interconnect.nodes=2", "devices=2", "profile=trace",
                    f"hydra.run.dir={root / 'between'}"],
        "inside": [*SLOW_LINK, "interconnect.nodes=1", "devices=2",
                   f"hydra.run.dir={root / 'inside'}"],
    }  # fmt: skip
    for name, args in runs.items():
        done = run_cli(args, 600)
        assert done.returncode == 0, (name, done.stderr[-3000:])
    return {name: root / name for name in runs}


@pytest.mark.slow
def test_each_strategy_s_step_is_what_its_bytes_over_both_link_classes_predict(slow_link):
    """Known answer 2: computing + the busiest uplink's bytes at the link probe's bus
    bandwidth + the bytes that stay inside a node at the node probe's - what overlapped,
    within 15 % of the step measured (2026-12-05, this 2-core machine: 1-8 % at 0.5 Gbit/s)
    where its inputs held still over its two runs; where they moved (the link probe read
    0.022-0.029 GB/s in jobs of one link on 2 cores, 2026-12-07) or other programs took the
    cores, the interval the summary states instead holds it. Known answer 3's order, on two
    jobs each (the committed experiment gives the verdicts): DDP's 1.5 B across the nodes
    beats FSDP's 3 B on gloo; HSDP's B is predicted ahead of DDP, and measured ahead where no
    input moved (its twice the gradients inside each node compete with the computing for 2
    cores: on a busy host the order is the host's, docs/emulated.md)."""
    rows = {r.strategy: r for r in _rows(slow_link["cluster"])}
    assert set(rows) == {"ddp", "fsdp", "hsdp"}
    for row in rows.values():
        assert_holds_what_it_states(row)
    assert rows["hsdp"].node_ms() > 0 and rows["ddp"].node_ms() == 0
    step = {s: r.step_ms.mean for s, r in rows.items()}
    assert step["ddp"] < 0.7 * step["fsdp"], step
    assert rows["hsdp"].predicted_ms() < 0.95 * rows["ddp"].predicted_ms()
    if not (rows["hsdp"].moved or rows["ddp"].moved):
        assert step["hsdp"] < step["ddp"], step


@pytest.mark.slow
def test_two_nodes_of_two_ranks_are_predicted_from_one_rank_a_node_and_one_node(slow_link):
    """Known answer 4: ``python -m linkbench.project --cluster 2x2`` from DDP on 2 nodes x 1
    rank and 1 node x 2 ranks predicts DDP on 2 x 2 within 15 %."""
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.project", str(slow_link["between"]), "--cluster",
         "2x2", "--inside", str(slow_link["inside"]), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    predicted = json.loads(done.stdout)["step_ms"]
    [ddp] = [r for r in _rows(slow_link["cluster"]) if r.strategy == "ddp"]
    measured = ddp.step_ms.mean
    assert abs(predicted / measured - 1) < 0.15, (predicted, measured)


@pytest.mark.slow
def test_compression_pays_what_its_halved_bytes_say(slow_link):
    """Known answer 5's step: DDP's fp16 hook halves the bytes through each uplink, and its
    step is the uncompressed one less the bytes it saves at the payload rate of the link's set
    rate, within 15 % (a truth chosen, not a probe: the probe read 0.022 and 0.029 GB/s in
    the two jobs, 2026-12-07)."""
    [none] = [r for r in _rows(slow_link["cluster"]) if r.strategy == "ddp"]
    [fp16] = _rows(slow_link["fp16"])
    assert fp16.link_bytes() == pytest.approx(none.link_bytes() / 2, rel=0.01)
    saved_ms = (none.link_bytes() - fp16.link_bytes()) / (payload_gb_s(RATE_GBIT_S) * 1e6)
    predicted = none.step_ms.mean - saved_ms
    assert abs(fp16.step_ms.mean / predicted - 1) < HOLDS, (fp16.step_ms.mean, predicted)
    assert fp16.step_ms.mean < 0.8 * none.step_ms.mean


def _rows(sweep: Path) -> list[LinkRow]:
    results = load_sweep(sweep)
    return link_rows(group(results, swept_keys(results)))
