"""A release of the Kubernetes manifests, rendered as docs/kubernetes.md says to make one: the
image tag and the release's name set in the base, the schedule file replaced, and for a
rollback the rollback component listed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from tests.support.manifests import render
from tests.support.paths import REPO_ROOT

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"


def copy_manifests(into: Path) -> Path:
    """deploy/kubernetes copied under `into` (without the example overlay); its path."""
    tree = into / "kubernetes"
    shutil.copytree(KUBERNETES, tree, ignore=shutil.ignore_patterns("example"))
    return tree


def render_release(
    tree: Path, *, tag: str, schedules: str, rollback: bool = False
) -> list[dict[str, Any]]:
    """Render the copy `tree` as the release `tag` of the schedule file `schedules`."""
    kustomization = tree / "base" / "kustomization.yaml"
    text = re.sub(r'newTag: "[^"]*"', f'newTag: "{tag}"', kustomization.read_text())
    text = re.sub(r"release=\S+", f"release={tag}", text)
    kustomization.write_text(text)
    (tree / "base" / "schedules.yaml").write_text(schedules)
    top = tree / "kustomization.yaml"
    components = "components:\n  - release\n" + ("  - rollback\n" if rollback else "")
    top.write_text(re.sub(r"components:\n(  - .*\n)+", components, top.read_text()))
    return render(tree)


def release_job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The one Job of a rendered release."""
    [job] = [d for d in docs if d["kind"] == "Job"]
    return job
