"""The interconnect arm's environment: which NCCL variables a job's workers get.

The variables live in the job's config (``interconnect.env``), so the saved config carries
them and a rerun applies them again. They are applied inside each worker process, before
the process group exists, and never to the launching process: nothing leaks into the next
job of a sweep. A variable the user exported with another value is replaced for the workers
and reported, since the config defines the experiment; override ``interconnect.env.NAME`` to
change it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from linkbench.errors import ConfigError

NVLS_VARIABLE = "NCCL_NVLS_ENABLE"


@dataclass(frozen=True)
class EnvPlan:
    """What the workers get on top of the inherited environment."""

    applied: dict[str, str] = field(default_factory=dict)
    """Variables set in every worker (the job's ``interconnect.env``)."""
    replaced: dict[str, str] = field(default_factory=dict)
    """Exported values that ``applied`` replaces in the workers, by variable."""
    inherited_nccl: dict[str, str] = field(default_factory=dict)
    """NCCL_* variables the workers inherit unchanged from the launching shell."""

    def warnings(self, interconnect: str) -> list[str]:
        return [
            f"{name}={old} exported in the environment is replaced by "
            f"interconnect={interconnect}'s {name}={self.applied[name]} in this job's workers; "
            "to change it, override "
            f"interconnect.env.{name}"
            for name, old in self.replaced.items()
        ]


def plan_env(requested: Mapping[str, str], environ: Mapping[str, str]) -> EnvPlan:
    """Check the requested variables and compare them with the exported environment."""
    applied = {str(k): str(v) for k, v in requested.items()}
    for name in applied:
        if not name.isidentifier():
            raise ConfigError(
                f"interconnect.env has a key {name!r} that is not an environment variable name; "
                "use names like NCCL_P2P_DISABLE."
            )
    if applied.get(NVLS_VARIABLE, "0") != "0":
        raise ConfigError(
            f"interconnect.env.{NVLS_VARIABLE}={applied[NVLS_VARIABLE]} is refused: linkbench only "
            f"ever sets {NVLS_VARIABLE}=0 (NVLink SHARP multicast can take a shared host's GPUs "
            f"out of service); remove the key or set it to 0."
        )
    replaced = {k: environ[k] for k, v in applied.items() if k in environ and environ[k] != v}
    inherited = {
        k: v for k, v in sorted(environ.items()) if k.startswith("NCCL_") and k not in applied
    }
    return EnvPlan(applied=applied, replaced=replaced, inherited_nccl=inherited)


def apply_env(variables: Mapping[str, str]) -> None:
    """Set the variables in this process (a worker, before it creates its process group)."""
    os.environ.update(variables)


def nccl_environment() -> dict[str, str]:
    """The NCCL_* variables this process sees, for the record."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
