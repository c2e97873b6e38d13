"""Every command the README and docs/ quote still composes, plans and, where they quote the
answer, answers the same; every `python -m linkbench.X` they name exists."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from linkbench.config.hydra_errors import sentence
from linkbench.config.machine import Machine
from linkbench.launcher.planning import plan_job
from linkbench.link.netns import emulation_problem

from .conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EIGHT_GPUS = Machine(cuda_devices=8, cpu_cores=128)
# Commands that need something only the reader has: a job or sweep directory, their folder.
PLACEHOLDERS = (
    "<",
    "...",
    "$PWD",
    "--config-path",
    "--config-dir",
    "--help",
    "/shared/",
    "my_models",
)


def quoted_commands(prefix: str, skip: tuple[str, ...]) -> list[tuple[str, str, str | None]]:
    """(page, command, the line printed after it when the page shows a `$ ` prompt)."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.strip().removeprefix("$ ")
            if not text.startswith(prefix) or not line.startswith("    "):
                continue
            shown = lines[i + 1].strip() if line.strip().startswith("$ ") else None
            command = text.split("  #")[0].strip()
            if not any(mark in command for mark in skip):
                found.append((page.name, command, shown))
        prose = re.sub(r"\s*\n\s*", " ", page.read_text())  # inline commands may wrap
        for command in re.findall(rf"`({re.escape(prefix)}[^`]*)`", prose):
            if not any(mark in command for mark in skip):
                found.append((page.name, command, None))
    return found


RUNS = quoted_commands("python run.py", PLACEHOLDERS)
MODULES = quoted_commands("python -m linkbench.", ())


def first_job(arguments: list[str]) -> list[str]:
    """The overrides of the first job a (multi)run command would start."""
    overrides = [a for a in arguments if a not in ("-m", "--multirun")]
    parsed = OverridesParser.create().parse_overrides(overrides)
    job = []
    for override in parsed:
        key = override.get_key_element()
        if key.startswith("hydra."):
            continue
        value = (
            next(iter(override.sweep_string_iterator()))
            if override.is_sweep_override()
            else (override.get_value_element_as_str())
        )
        job.append(f"{key}={value}")
    return job


def test_the_pages_quote_commands():
    assert len(RUNS) >= 17 and len(MODULES) >= 5


@pytest.mark.parametrize(("page", "command", "shown"), RUNS, ids=[c for _, c, _ in RUNS])
def test_every_quoted_run_command_plans(compose_config, tmp_path, page, command, shown):
    arguments = shlex.split(command)[2:]
    if "--cfg" in arguments:
        arguments = arguments[: arguments.index("--cfg")]
    overrides = first_job(arguments)
    if "emulated" in command and (problem := emulation_problem(delay=False)):
        pytest.skip(problem)  # the page's command needs the rights to make namespaces
    if shown is not None:  # a refusal the page shows with its message
        with pytest.raises(Exception) as error:  # the plan's, or Hydra's own (as run.py says it)
            plan_job(compose_config(overrides), str(tmp_path), [], EIGHT_GPUS)
        assert sentence(error.value, overrides) == shown, page
        return
    plan = plan_job(compose_config(overrides), str(tmp_path), [], EIGHT_GPUS)
    assert plan.world_size > 0


@pytest.mark.parametrize(("page", "command", "shown"), MODULES, ids=[c for _, c, _ in MODULES])
def test_every_quoted_module_runs_and_takes_the_quoted_options(page, command, shown):
    """``python -m NAME --help`` runs, and every ``--option`` the page quotes is one it has."""
    name = re.match(r"python -m (\S+)", command).group(1)
    done = subprocess.run([sys.executable, "-m", name, "--help"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert done.returncode == 0 and "usage" in done.stdout.lower(), f"{page}: {done.stderr}"
    for option in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", command):
        assert option in done.stdout, f"{page}: {name} has no {option}"


def test_every_relative_link_points_at_a_file():
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / link).exists(), f"{page.name} links to a missing {link}"


def test_the_readmes_default_job_prints_the_losses_it_shows(tmp_path):
    """The README shows the default job's console; its losses are a seeded CPU run's, the
    same on every run of this torch, so they are checked, not only its shape (before: the
    README showed a held-out loss the job no longer printed)."""
    from .conftest import run_cli

    readme = (REPO / "README.md").read_text()
    shown = dict(re.findall(r"INFO step (\d+)/100  loss (\d+\.\d+)", readme))
    final = re.search(r"final loss (\d+\.\d+) -> outputs/run", readme)
    assert len(shown) >= 2 and final, "the README shows the default job's steps and final loss"
    done = run_cli([f"hydra.run.dir={tmp_path / 'job'}"], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = dict(re.findall(r"step (\d+)/100\s+loss (\d+\.\d+)", done.stdout + done.stderr))
    assert {step: printed.get(step) for step in shown} == shown
    assert f"final loss {final.group(1)} ->" in done.stdout + done.stderr


def test_conf_readme_names_every_option_that_is_not_a_file_there():
    """A newcomer browsing conf/ finds every option: those stored from Python (task,
    strategy, data, interconnect=emulated, model=auto, precision=auto) are named in
    conf/README.md with where they are defined."""
    from hydra.core.config_store import ConfigStore

    from linkbench.config.registry import register

    register(REPO)
    readme = (REPO / "conf" / "README.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines() if line[:3] == "| `"}
    stored = [
        (group, name.removesuffix(".yaml"))
        for group, named in ConfigStore.instance().repo.items()
        if isinstance(named, dict) and group != "hydra"
        for name in named
    ]
    assert len(stored) >= 15
    for group, name in stored:
        row = next((line for key, line in rows.items() if f"`{group}`" in key), "")
        assert f"`{name}`" in row, f"conf/README.md does not name {group}={name}"
        assert not (REPO / "conf" / group / f"{name}.yaml").exists()
