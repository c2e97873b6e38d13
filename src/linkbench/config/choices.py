"""The config's choices: every enum a key may take (a value outside one fails at
composition) and the constants the checks and the workers share."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A config choice; formats as its value (``nccl``, not ``BackendName.nccl``)."""

    def __str__(self) -> str:
        return str(self.value)


class BackendName(Choice):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class InterconnectName(Choice):
    auto = "auto"
    nvlink = "nvlink"
    pcie = "pcie"
    socket = "socket"
    emulated = "emulated"


class Transport(Choice):
    """The transport family NCCL is expected to pick for an interconnect arm."""

    any = "any"
    P2P = "P2P"
    SHM = "SHM"
    NET = "NET"


class PrecisionName(Choice):
    auto = "auto"  # resolved by the plan, for the machine it plans for
    fp32 = "fp32"
    tf32 = "tf32"
    fp16 = "fp16"
    bf16 = "bf16"


class AutocastDtype(Choice):
    float16 = "float16"
    bfloat16 = "bfloat16"


class ScalingRule(Choice):
    linear = "linear"
    sqrt = "sqrt"
    none = "none"


class ModelInput(Choice):
    image = "image"
    tokens = "tokens"


class WarmupFrom(Choice):
    zero = "zero"
    base = "base"


class Decay(Choice):
    none = "none"
    step = "step"
    cosine = "cosine"


class TensorDtype(Choice):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class NcclAlgo(Choice):
    """NCCL_ALGO's values (NCCL's env docs); NVLS and NVLSTree are refused (NVLS stays off)."""

    ring = "Ring"
    tree = "Tree"
    collnet_direct = "CollnetDirect"
    collnet_chain = "CollnetChain"
    nvls = "NVLS"
    nvls_tree = "NVLSTree"
    pat = "PAT"


class NcclProto(Choice):
    simple = "Simple"
    ll = "LL"
    ll128 = "LL128"


class ProfileName(Choice):
    none = "none"
    trace = "trace"


class Collective(Choice):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"


# NVML updates utilisation and PCIe throughput over windows of 20 ms and more.
MAX_SAMPLE_HZ = 50.0
# A job's training steps when neither steps, epochs nor samples says.
DEFAULT_STEPS = 100
# Steps not timed when untimed_steps is null, in a run of 20 steps or more.
DEFAULT_UNTIMED_STEPS = 10
# torch.compile's modes (torch.compile's docstring); hyphens rule out an enum.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int8")
# Steps in which torch.compile compiles (and reduce-overhead records its graphs).
COMPILE_STEPS = 3
# Eager DDP steps before a CUDA-graph capture: PyTorch's CUDA semantics notes ask for at
# least 11 ("Usage with DistributedDataParallel"); the capture is the step after them.
CUDA_GRAPH_EAGER_STEPS = 11
