"""The interconnect arms set the NCCL variables they promise, and nothing unsafe."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from linkbench.config.links import INTERCONNECTS
from linkbench.errors import ConfigError
from linkbench.link.interconnect import plan_env

from ..conftest import CONF

# The NCCL arms are YAML files; the emulated link, which has settings, is a dataclass.
ARMS = sorted([*(p.stem for p in (CONF / "interconnect").glob("*.yaml")), *INTERCONNECTS])


def arm(name: str) -> dict:
    """The arm's node as run.py composes it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"interconnect={name}"])
    found = OmegaConf.to_container(cfg.interconnect, resolve=True)
    assert isinstance(found, dict)
    return found


def test_arms_are_the_documented_five():
    assert ARMS == ["auto", "emulated", "nvlink", "pcie", "socket"]


def test_auto_sets_nothing():
    assert arm("auto")["env"] == {}


def test_nvlink_allows_peer_to_peer():
    assert arm("nvlink")["env"] == {"NCCL_P2P_DISABLE": "0"}
    assert arm("nvlink")["expected_transport"] == "P2P"


def test_pcie_disables_p2p_and_nvls_and_says_it_is_host_staged():
    pcie = arm("pcie")
    assert pcie["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    assert pcie["expected_transport"] == "SHM"
    assert "host" in pcie["description"] and "cannot switch off only NVLink" in pcie["description"]


def test_emulated_sends_nccl_over_sockets_only():
    emulated = arm("emulated")
    off = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE")
    assert all(emulated["env"][name] == "1" for name in off)
    assert emulated["env"]["NCCL_NVLS_ENABLE"] == "0" and emulated["env"]["NCCL_NET"] == "Socket"
    assert emulated["expected_transport"] == "NET" and emulated["rate_gbit_s"] > 0


def test_socket_also_disables_shared_memory():
    socket = arm("socket")
    assert socket["env"]["NCCL_SHM_DISABLE"] == "1"
    assert socket["env"]["NCCL_P2P_DISABLE"] == "1"
    assert socket["expected_transport"] == "NET"


@pytest.mark.parametrize("name", ARMS)
def test_no_arm_enables_nvls(name):
    assert arm(name)["env"].get("NCCL_NVLS_ENABLE", "0") == "0"


def test_exported_value_is_reported_when_replaced():
    env = plan_env({"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"})
    assert env.applied == {"NCCL_P2P_DISABLE": "1"}
    assert env.replaced == {"NCCL_P2P_DISABLE": "0"}
    assert env.inherited_nccl == {"NCCL_DEBUG": "WARN"}
    (warning,) = env.warnings("pcie")
    assert "NCCL_P2P_DISABLE=0" in warning and "interconnect.env.NCCL_P2P_DISABLE" in warning


def test_same_exported_value_is_not_a_conflict():
    env = plan_env({"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_DISABLE": "1"})
    assert env.replaced == {}
    assert env.warnings("pcie") == []


def test_nvls_other_than_zero_is_refused():
    with pytest.raises(ConfigError, match="NCCL_NVLS_ENABLE"):
        plan_env({"NCCL_NVLS_ENABLE": "1"}, {})


def test_bad_variable_name_is_refused():
    with pytest.raises(ConfigError, match="not an environment variable name"):
        plan_env({"NCCL P2P": "1"}, {})
