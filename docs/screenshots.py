"""The docs' TensorBoard screenshots, made again from the browser test's own.

The TensorBoard review test (tests/analysis/test_tensorboard_review.py) opens each dashboard of
a real sweep in chromium, checks what a reviewer sees and keeps a screenshot of each under
artifacts/tensorboard-<sweep>/. This script runs that test (the committed CPU experiment; with
--emulated also the emulated-link one, which needs root and a few minutes) and copies the
screenshots the docs show into docs/, cut to the part with content:

    python docs/screenshots.py [--emulated] [--no-run]

--no-run copies what the last run of the test left.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("LINKBENCH_ARTIFACTS", REPO / "artifacts"))
TEST = "tests/analysis/test_tensorboard_review.py"
# (sweep, dashboard) -> (the docs' file, the height kept from the top, in pixels)
SHOWN = {
    ("cpu_smoke", "hparams"): ("tensorboard-hparams.png", 330),
    ("cpu_smoke", "text"): ("tensorboard-text.png", 760),
    ("emulated_link", "hparams"): ("tensorboard-hparams-emulated.png", 280),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emulated", action="store_true", help="the emulated link's too (root)")
    parser.add_argument("--no-run", action="store_true", help="copy the last run's screenshots")
    args = parser.parse_args()
    if not args.no_run:
        tests = [f"{TEST}::test_a_reviewer_sees_the_cpu_sweeps_answer_as_tensorboard_opens"]
        if args.emulated:
            tests.append(
                f"{TEST}::test_a_reviewer_sees_the_emulated_links_answer_as_tensorboard_opens"
            )
        env = {**os.environ, "LINKBENCH_REQUIRE_BROWSER": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "", *tests], cwd=REPO,
                              env=env)  # fmt: skip
        if done.returncode != 0:
            return done.returncode
    for (sweep, dashboard), (name, height) in SHOWN.items():
        shot = ARTIFACTS / f"tensorboard-{sweep}" / f"{dashboard}.png"
        if not shot.is_file():
            print(f"skipped {name}: no {shot}", file=sys.stderr)
            continue
        with Image.open(shot) as image:
            image.crop((0, 0, image.width, min(height, image.height))).save(REPO / "docs" / name)
        print(f"docs/{name} from {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
