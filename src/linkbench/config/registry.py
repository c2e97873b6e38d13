"""The schema's registration in Hydra's ConfigStore: :class:`~linkbench.config.schema.Config`
as ``linkbench_schema``, every task, strategy, data and interconnect option under its group
and name, and ``auto``
(``model=auto``, ``precision=auto``), which the plan resolves for the machine it plans for.
The one module that knows every option: it imports the schema and the options' modules,
none of which imports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict

from linkbench.config.data import DATA
from linkbench.config.groups import ModelConfig, PrecisionConfig
from linkbench.config.links import INTERCONNECTS
from linkbench.config.schema import Config
from linkbench.config.strategies import STRATEGIES
from linkbench.config.tasks import TASKS
from linkbench.errors import ConfigError

# The checkout this package was installed from (``pip install -e``): run.py and conf/.
CHECKOUT = Path(__file__).resolve().parents[3]


def options() -> dict[str, dict[str, type]]:
    """The options of the groups whose options are dataclasses of their own: group -> name
    -> the option's dataclass (:mod:`linkbench.config.tasks`, :mod:`.strategies`,
    :mod:`.data`, :data:`~linkbench.config.links.INTERCONNECTS`)."""
    return {"task": TASKS, "strategy": STRATEGIES, "data": DATA, "interconnect": INTERCONNECTS}


def group_names(project_root: Path = CHECKOUT) -> set[str]:
    """Every config group a command line may choose an option of: conf/'s folders, the
    groups of dataclass options, and the groups options have of their own
    (``strategy/comm_hook``)."""
    conf = project_root / "conf"
    folders = {p.relative_to(conf).as_posix() for p in conf.rglob("*") if p.is_dir()}
    own = {
        f"{group}/{name}"
        for group, named in options().items()
        for option in named.values()
        for name in getattr(option, "groups", {})
    }
    return folders | set(options()) | own


def register_schema() -> None:
    """Store :class:`Config` as ``linkbench_schema`` and every task, strategy and data option
    under its group and name (idempotent; ``hydra/sweeper=rounds`` is stored by the
    sweeper's plugin, which Hydra imports when it looks for plugins). An option with groups
    of its own (``groups``: DDP's ``comm_hook``) gets them in its defaults list, after
    itself, so ``strategy/comm_hook=bf16`` composes into ``strategy.comm_hook`` and a strategy
    without the group has no such key to set."""
    store = ConfigStore.instance()
    store.store(name="linkbench_schema", node=Config)
    for group, named in options().items():
        for name, option in named.items():
            node: Any = option
            if groups := getattr(option, "groups", None):
                node = OmegaConf.structured(option)
                with open_dict(node):
                    node.defaults = ["_self_", *({g: o} for g, o in groups.items())]
            store.store(group=group, name=name, node=node)


# model=auto and precision=auto, by whether CUDA GPUs are visible: on GPUs a model whose
# gradients make the link matter, on CPU one that trains on two cores in seconds.
AUTO_OPTIONS = {
    False: {"model": "tiny", "precision": "fp32"},
    True: {"model": "resnet50", "precision": "bf16"},
}
AUTO = "auto"
_auto_nodes: dict[tuple[str, str], DictConfig] = {}  # (group, option): its YAML, by register


def auto_options(cuda_devices: int) -> dict[str, str]:
    """The options ``model=auto`` and ``precision=auto`` stand for on a machine with
    ``cuda_devices`` GPUs."""
    return AUTO_OPTIONS[cuda_devices > 0]


def auto_node(group: str, option: str) -> DictConfig:
    """An option ``auto`` may stand for (or ``auto`` itself), as composing it would give: its
    YAML (registered by :func:`register`) over its group's dataclass."""
    if (group, option) not in _auto_nodes and (CHECKOUT / "conf").is_dir():
        register(CHECKOUT)  # a process of a launcher's own (submitit's): run.py did not run
    if (group, option) not in _auto_nodes:
        raise ConfigError(
            f"{group}=auto is chosen by the plan from conf/{group}/, which was not registered; "
            "call linkbench.config.registry.register(project_root) first."
        )
    schema = {"model": ModelConfig, "precision": PrecisionConfig}[group]
    node = OmegaConf.merge(OmegaConf.structured(schema), _auto_nodes[(group, option)])
    assert isinstance(node, DictConfig)
    return node


def register(project_root: Path) -> None:
    """Register the schema; ``model=auto`` and ``precision=auto`` as options named ``auto``
    that :func:`~linkbench.config.plan.make_plan` resolves for the machine it plans for
    (:func:`auto_options`), with the YAML of the options they may stand for; and
    ``${linkbench_root:}`` (the folder holding run.py and experiments/) for
    conf/config.yaml's search path, so +experiment works from any directory."""
    register_schema()
    store = ConfigStore.instance()
    for group in ("model", "precision"):
        _auto_nodes[(group, AUTO)] = OmegaConf.create({"name": AUTO})
        store.store(group=group, name=AUTO, node=_auto_nodes[(group, AUTO)])
        for options in AUTO_OPTIONS.values():
            node = OmegaConf.load(project_root / "conf" / group / f"{options[group]}.yaml")
            assert isinstance(node, DictConfig)
            _auto_nodes[(group, options[group])] = node
    if not OmegaConf.has_resolver("linkbench_root"):
        OmegaConf.register_new_resolver("linkbench_root", lambda: str(project_root))
