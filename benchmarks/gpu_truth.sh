#!/usr/bin/env bash
# The measurements behind benchmarks/RESULTS.md's "Calibration and traces" section, in one call
# of the GPU machine (under 10 minutes). Usage, from the repository root:
#   bash benchmarks/gpu_truth.sh OUT_DIR
# Writes OUT_DIR/truth.log (every command and its console, then a digest of the results) and
# OUT_DIR/truth.tgz (the summaries and result.json files).
set -u
out=$1
mkdir -p "$out"
runs=$(mktemp -d)
log="$out/truth.log"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step() {  # step NAME OVERRIDES...: one run.py command into $runs/NAME
  local name=$1
  shift
  echo "=== $name: $* ($(date -u +%H:%M:%S))" >>"$log"
  local started=$SECONDS
  timeout 200 python3 run.py "$@" >>"$log" 2>&1
  echo "=== $name: exit $? after $((SECONDS - started)) s" >>"$log"
}

# 1. The issue's calibration command: a 2 ms device-side delay, 4 interleaved rounds.
step delay -m debug.step_delay_ms=0,2 batch=256 repeats=4 steps=60 \
  hydra.callbacks.sweep_summary.axis=debug.step_delay_ms hydra.callbacks.sweep_summary.baseline=0 \
  "hydra.sweep.dir=$runs/delay"
# 2. A known communication delay (5 ms per bucket) found by the probe and by the trace.
step comm model=resnet50 batch=64 steps=40 untimed_steps=10 debug.comm_delay_ms=5 \
  task.no_sync_steps=10 profile=trace "hydra.run.dir=$runs/comm"
# 3. Profiler settings against the untraced step (the issue's job: resnet50 bf16, batch 64).
for variant in "default:" "no_cpu:profile.cpu=false" "shapes:profile.record_shapes=true" \
  "stack:profile.with_stack=true" "steps2:profile.steps=2" "steps10:profile.steps=10"; do
  name=${variant%%:*}
  extra=${variant#*:}
  step "trace_$name" batch=64 steps=40 profile=trace $extra "hydra.run.dir=$runs/trace_$name"
done
python3 - "$runs" >>"$log" 2>&1 <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
for result in sorted(root.rglob("result.json")):
    r = json.loads(result.read_text()); m = r.get("metrics", {}); t = (r.get("trace") or {}).get("mean", {})
    keys = ("step_time_ms", "comm_exposed_ms", "comm_exposed_ms_low", "comm_exposed_ms_high",
            "comm_delay_injected_ms", "comm_delay_buckets", "compute_step_ms")
    print(result.parent.relative_to(root), r.get("status"), {k: round(m[k], 3) for k in keys if k in m},
          {k: round(v, 3) for k, v in t.items() if isinstance(v, float)})
PY
cat "$runs/delay/summary.md" >>"$log" 2>&1
tar -czf "$out/truth.tgz" -C "$runs" --exclude='*.pt' --exclude='traces' --exclude='.compile_cache' . 2>>"$log"
echo "=== done $(date -u +%H:%M:%S)" >>"$log"
