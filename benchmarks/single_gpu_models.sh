#!/usr/bin/env bash
# Training throughput of resnet50 and gpt (bf16, batch 32 and 256) plus the default job,
# on whatever GPUs are visible. Results: outputs/bench/single_gpu_models/*/result.json.
# Usage: bash benchmarks/single_gpu_models.sh   (from the repository root)
set -euo pipefail
out=outputs/bench/single_gpu_models
python run.py hydra.run.dir="$out/default"
python run.py -m repeats=1 model=resnet50,gpt precision=bf16 batch=32,256 steps=60 untimed_steps=20 \
  log_every=20 hydra.sweep.dir="$out"
python - "$out" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/result.json")):
    r = json.loads(path.read_text()); m = r["metrics"]
    print(f"{path.parent.name:70s} {m['samples_per_sec']:10.1f} samples/s "
          f"{m['step_time_ms']:8.2f} ms/step (windows {m['step_time_ms_min']:.2f}-{m['step_time_ms_max']:.2f})")
PY
