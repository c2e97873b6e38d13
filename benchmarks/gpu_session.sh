#!/usr/bin/env bash
# The measurements behind benchmarks/RESULTS.md's one-GPU sections, in three parts that each
# fit one call of the GPU machine (under 10 minutes). Usage, from the repository root:
#   bash benchmarks/gpu_session.sh part1 OUT_DIR     (part2, part3, overhead likewise)
# Each part writes OUT_DIR/<part>.log (every command and its console) and OUT_DIR/<part>.tgz
# (every sweep's summary, result.json files and plots). Failures are logged, not fatal.
set -u
part=$1
out=$2
mkdir -p "$out"
runs=$(mktemp -d)
log="$out/$part.log"
export PYTHONUNBUFFERED=1
# NVLink SHARP stays off wherever linkbench runs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step() {  # step NAME COMMAND...: run, time and log one measurement
  local name=$1
  shift
  echo "=== $name: $* ($(date -u +%H:%M:%S))" >>"$log"
  local started=$SECONDS
  "$@" >>"$log" 2>&1
  echo "=== $name: exit $? after $((SECONDS - started)) s" >>"$log"
}

sweep() {  # sweep NAME OVERRIDES...: a multirun into $runs/NAME
  local name=$1
  shift
  step "$name" python3 run.py -m "$@" "hydra.sweep.dir=$runs/$name"
}

case "$part" in
part1)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$log" 2>&1
  nvidia-smi topo -m >>"$log" 2>&1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" >>"$log" 2>&1
  # The README's sweep with the default job on a GPU (resnet50 bf16), 3 interleaved rounds:
  # an A/A test on one GPU (both arms are the same machine state) and the sweep's wall time.
  sweep aa interconnect=nvlink,pcie batch=32,256 repeats=3 steps=120 untimed_steps=20 log_every=20
  # The README's command as typed (adaptive rounds): time to an answer, wall time, first steps.
  sweep readme interconnect=nvlink,pcie batch=32,256 steps=120 untimed_steps=20 log_every=20
  # Logging out of the timed windows: log_every=1 against 25, 3 rounds.
  sweep logging log_every=1,25 batch=256 repeats=3 steps=60 untimed_steps=20 task.no_sync_steps=0 \
    hydra.callbacks.sweep_summary.axis=log_every hydra.callbacks.sweep_summary.baseline=25 \
    hydra.callbacks.sweep_summary.margin=0.05
  # The NVML sampler's overhead: hw_sample_hz=10 against 0, 3 rounds.
  sweep sampler hw_sample_hz=0,10 batch=256 repeats=3 steps=60 untimed_steps=20 log_every=20 \
    hydra.callbacks.sweep_summary.axis=hw_sample_hz hydra.callbacks.sweep_summary.baseline=0 \
    hydra.callbacks.sweep_summary.margin=0.01
  ;;
part2)
  # GPU tests of the paths a CPU cannot take.
  step gpu_tests python3 -m pytest -m gpu -x -q -p no:cacheprovider tests/test_gpu.py \
    -k "default_job or traced or mfu"
  # The textbook script's time to its first step, for the start-up target.
  step plain python3 benchmarks/plain_ddp.py --model resnet50 --batch 256 --precision bf16 --steps 30 \
    --warmup 10 --channels-last --out "$runs/plain_ddp.json"
  # Links, strategies, NCCL tuning on the one GPU.
  sweep links task=links repeats=1
  sweep strategies repeats=1 strategy=ddp,fsdp model=gpt batch=16 steps=40 untimed_steps=10 log_every=10
  sweep nccl repeats=1 nccl.proto=simple,ll128 task=allreduce task.max_bytes=268435456 task.ops=[all_reduce]
  ;;
part3)
  # cuDNN's autotuning: first step and steady step with it on and off.
  sweep cudnn model=resnet50,resnet18,vit_b_16 batch=32,256 cudnn_benchmark=true,false steps=60 \
    untimed_steps=20 log_every=20 task.no_sync_steps=0 eval.enabled=false
  # torch.compile in a sweep: the second job compiles from the first one's cache.
  sweep compile seed=0,1 compile=true batch=256 steps=60 untimed_steps=20 log_every=20 task.no_sync_steps=0
  ;;
overhead)
  # Half a job's cost outside its timed steps (benchmarks/job_overhead.py on CPU): the README's
  # sweep as typed (time to both verdicts, the share of timed steps, the one-rank note), then
  # lone jobs against the textbook script, eager, in turns (first step, throughput).
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$log" 2>&1
  sweep readme interconnect=nvlink,pcie batch=32,256
  step vs_plain python3 benchmarks/vs_plain.py --preset gpu-eager --rounds 2 --out "$out/vs_plain.json"
  ;;
esac
tar -czf "$out/$part.tgz" -C "$runs" --exclude='*.pt' --exclude='traces' --exclude='.compile_cache' . 2>>"$log"
tar -czf "$out/${part}_traces.tgz" -C "$runs" --wildcards '*/traces/rank0.json.gz' 2>/dev/null || true
echo "=== done $(date -u +%H:%M:%S)" >>"$log"
