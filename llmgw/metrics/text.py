"""Gauge families written straight to Prometheus's text format.

prometheus-client's families check every label name and escape every
label value again for each sample, and hold each sample as a named tuple
until the end; at 5,000 nodes (about a million series) that alone cost
more CPU than a whole scrape interval allows. Here the label names are
checked once per family, each sample is one line built at once, and only
a value holding a backslash, a quote or a newline is escaped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def number(value: float) -> str:
    """A sample value as Go's ParseFloat reads it."""
    if value.__class__ is int:
        return str(value)
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


class Family:
    """One gauge: its HELP and TYPE, then its samples, one line each."""

    __slots__ = ("name", "doc", "lines", "_format", "_width")

    def __init__(self, name: str, doc: str, labels: Sequence[str] = ()) -> None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a metric name: {name!r}")
        for label in labels:
            if not _LABEL.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"{name}: not a label name: {label!r}")
        self.name, self.doc = name, doc
        self.lines: list[str] = []
        # name{a="%s",b="%s"} %s: one formatting per sample.
        pairs = ",".join(f'{label}="%s"' for label in labels)
        self._format = f"{name}{{{pairs}}} %s" if labels else f"{name} %s"
        self._width = len(labels)

    def add_metric(self, values: Sequence[str], value: float) -> None:
        joined = "".join(values)
        if "\\" in joined or '"' in joined or "\n" in joined:
            values = [_escape(v) for v in values]
        kind = value.__class__
        if kind is float and value - value == 0.0:  # finite
            text = repr(value)
        elif kind is int:
            text = str(value)
        else:
            text = number(value)
        try:
            # The format's arity checks the number of label values.
            line = self._format % (*values, text)
        except TypeError:
            wanted = f"{self._width} label values wanted, got {len(values)}"
            raise ValueError(f"{self.name}: {wanted}") from None
        self.lines.append(line)

    def text(self) -> str:
        doc = self.doc.replace("\\", "\\\\").replace("\n", "\\n")
        head = f"# HELP {self.name} {doc}\n# TYPE {self.name} gauge\n"
        return head + "".join(("\n".join(self.lines), "\n")) if self.lines else head


def render(families: Iterable[Family]) -> str:
    return "".join(f.text() for f in families)
