"""The house's rules that the import contracts (pyproject.toml, ``lint-imports``) cannot say:
the plan resolves a job's parts once and nothing after it looks one up by name, and no source
file grows past about 600 lines. Each rule is checked on a sample that breaks it, too."""

from __future__ import annotations

import ast

import pytest

from .conftest import REPO

SOURCES = sorted((REPO / "src").rglob("*.py"))

# The calls that find a task's, strategy's or data option's class or spec from its name (its
# _target_), and the only functions that may make them: make_plan, what it calls, and the
# launcher's gathering of the facts it plans from (whether the task trains: its data surveyed).
LOOKUPS: dict[str, set[str]] = {
    "import_class": {
        "linkbench/config/schema.py:StrategyConfig.spec",
        "linkbench/config/schema.py:TaskConfig.spec",
        "linkbench/config/targets.py:subclass_named",
    },
    "subclass_named": {
        "linkbench/worker/task.py:task_class",
        "linkbench/parts/strategy.py:strategy_class",
        "linkbench/parts/datasets.py:data_class",
    },
    "task_class": {"linkbench/worker/runtime.py:runtime_of"},
    "strategy_class": {"linkbench/worker/runtime.py:runtime_of"},
    "data_class": {"linkbench/worker/runtime.py:runtime_of"},
    "spec": {
        "linkbench/config/plan.py:make_plan",
        "linkbench/config/schema.py:StrategyConfig.check",
        "linkbench/launcher/planning.py:gather_facts",
    },
    "runtime_of": {"linkbench/config/plan.py:make_plan"},
}
MAX_LINES = 600


def lookups(tree: ast.AST, module: str) -> list[str]:
    """``module:function`` of every call in ``tree`` that looks a part up by name where
    :data:`LOOKUPS` does not allow it."""
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scope = [*scope, node.name]
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            where = f"{module}:{'.'.join(scope)}"
            if name in LOOKUPS and where not in LOOKUPS[name]:
                found.append(f"{where} calls {name}")
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def test_nothing_after_the_plan_looks_a_part_up_by_name():
    """A job's task, strategy and data classes are resolved by make_plan (its runtime_of) and
    carried by the plan; a worker, the record or the report that looked one up again from
    config.task._target_ would be a second registry."""
    found = []
    for path in SOURCES:
        module = str(path.relative_to(REPO / "src"))
        found += lookups(ast.parse(path.read_text()), module)
    assert found == []
    # the rule's own allowances name functions that exist
    defined = set()
    for path in SOURCES:
        module = str(path.relative_to(REPO / "src"))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined |= {
                    f"{module}:{node.name}.{f.name}"
                    for f in node.body
                    if isinstance(f, ast.FunctionDef)
                }
            elif isinstance(node, ast.FunctionDef):
                defined.add(f"{module}:{node.name}")
    assert set().union(*LOOKUPS.values()) <= defined


@pytest.mark.parametrize(
    "source",
    [
        "def run(plan):\n    return task_class(plan.config.task._target_).run(plan)\n",
        "class Board:\n    def add(self, plan):\n        return plan.config.task.spec().headline\n",
        "def build(plan):\n    return import_class('strategy._target_', t, 'b', 'x')\n",
    ],
)
def test_a_lookup_after_the_plan_is_found(source):
    assert lookups(ast.parse(source), "linkbench/worker/main.py") != []


def test_no_source_file_passes_about_600_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in SOURCES
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
