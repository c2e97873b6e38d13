"""torch.compile's caches, kept per sweep so the jobs after the first compile from them.

With ``compile=true`` each worker points Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``: the
FX graph cache, the autotuning results) and Triton's kernel cache (``TRITON_CACHE_DIR``) at
``<sweep>/.compile_cache`` (a single job uses torch's own per-user default), turns on the FX
graph and AOTAutograd caches, and after the first (compiling) step reads torch's counters of
cache hits and misses into ``metrics.compile_cache``. A directory that cannot be used is
named in one line and the job compiles without it; a cache never fails a job.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("linkbench")


def use_cache(directory: str | None) -> dict[str, Any]:
    """Point this process's compile caches at ``directory`` (None: torch's default)."""
    record: dict[str, Any] = {"dir": directory or "torch default"}
    try:
        import torch._functorch.config as functorch_config
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = True
        functorch_config.enable_autograd_cache = True
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            probe = Path(directory) / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
            os.environ["TRITON_CACHE_DIR"] = str(Path(directory) / "triton")
    except Exception as error:  # never a reason to fail the job
        record = {"dir": "torch default", "problem": f"{directory}: {error}"}
        log.warning("compile cache %s unusable (%s); compiling without it", directory, error)
    return record


def cache_counters() -> dict[str, int]:
    """Hits and misses of the FX graph and AOTAutograd caches in this process so far."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {
        "fxgraph_hits": int(inductor.get("fxgraph_cache_hit", 0)),
        "fxgraph_misses": int(inductor.get("fxgraph_cache_miss", 0)),
        "autograd_hits": int(aot.get("autograd_cache_hit", 0)),
        "autograd_misses": int(aot.get("autograd_cache_miss", 0)),
    }
