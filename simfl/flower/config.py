"""The run config of a Flower app, read from its ``pyproject.toml`` as Flower reads it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.common.config import get_fused_config_from_dir

__all__ = ["run_config"]


def run_config(
    project_dir: str | Path, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``[tool.flwr.app.config]`` of the app in ``project_dir``, with ``overrides``.

    What ``flwr run <project_dir> --run-config ...`` gives every ``Context.run_config``:
    Flower's own reader (nested tables flattened to dotted keys; an override of a key the app
    does not declare is an error).

    Parameters
    ----------
    project_dir
        The app's directory (the one holding its ``pyproject.toml``).
    overrides
        Values replacing the app's defaults, by key.
    """
    path = Path(project_dir)
    if not (path / "pyproject.toml").is_file():
        raise ValueError(f"run_config: no pyproject.toml in {str(path)!r}")
    return dict(get_fused_config_from_dir(path, dict(overrides or {})))
