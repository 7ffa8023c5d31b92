"""Paths of the fabric test data (copied into the project; never read from ../shared)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
REAL = DATA / "realdata"
IBSIM = DATA / "ibsim"
NDR = REAL / "ibnetdiscover-nvidia-topograph.txt"
NDR_BAD = REAL / "ibnetdiscover-nvidia-topograph-bad.txt"
PORTS = REAL / "ibnetdiscover-ports-treydock.txt"
