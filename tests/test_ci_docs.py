"""docs/index.md says what CI's script runs: every job of `.ci/run` is named there (issue 55: the
page said it ran "exactly" the README's test command while it also built the site and ran the
TRL and second-Python jobs)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"
# a command of .ci/run -> the words docs/index.md names it by
JOBS = {
    "ruff format --check": "ruff format --check",
    "mkdocs build --strict": "mkdocs build --strict",
    "tests/integrations/test_trl.py": "TRL integration's tests",
    '-m "not slow"': "non-slow tests",
    "python -m pytest -n auto": "whole test suite",
}


@pytest.mark.skipif(not CI.exists(), reason="a checkout's CI script")
def test_the_docs_name_every_job_of_the_ci_script():
    script = CI.read_text()
    page = " ".join((ROOT / "docs" / "index.md").read_text().split())
    assert ".ci/run" in page and "runs exactly" not in page
    for command, words in JOBS.items():
        assert command in script, command  # a job renamed in the script: update JOBS and the page
        assert words in page, words
