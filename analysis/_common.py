"""Helpers shared by the analysis scripts: argument parsing and figure output."""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="reduced size (used by the tests)")
    p.add_argument("--out", default=str(HERE / "figures"), help="directory for the figure")
    return p


def save(fig, out: str, name: str) -> Path:  # type: ignore[no-untyped-def]
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    file = path / f"{name}.png"
    fig.savefig(file, dpi=120, bbox_inches="tight")
    return file
