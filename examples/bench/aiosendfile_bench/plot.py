"""--plot FILE.png: throughput and server CPU per row, one pair of panels per table.

matplotlib is optional (``pip install aiosendfile[bench]``); only this module imports it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from .report import describe_machine, section_title
from .results import Section
from .workloads import Placement

# One colour per kind of row, so the eye finds aiosendfile in every panel.
_COLOURS = {
    "limit-uncorked": "#c7c7c7",
    "limit": "#7f7f7f",
    "upload-limit": "#7f7f7f",
    "tls-thread": "#7f7f7f",
    "nginx": "#8c564b",
    "blocking": "#7f7f7f",
    "aiosendfile": "#1f77b4",
    "loop.sendfile": "#d62728",
    "buffered": "#ff7f0e",
    # HTTP: aiosendfile's FileResponse, aiohttp's on aiosendfile's loops, aiohttp's own.
    "aiohttp-dropin": "#1f77b4",
    "aiohttp-ourloop": "#9467bd",
    "aiohttp": "#ff7f0e",
}


def plot(
    path: str,
    sections: Sequence[Section],
    machine: dict[str, Any],
    command: str,
    placement: Placement | None,
) -> None:
    # Optional (the [bench] extra), so mypy may not find it; the command line checked it is here.
    import matplotlib  # type: ignore[import-not-found, unused-ignore]

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    shown = [section for section in sections if section.rows]
    if not shown:
        raise ValueError("nothing to plot: no row was measured")
    heights = [0.9 + 0.28 * len(section.rows) for section in shown]
    fig, axes = plt.subplots(
        len(shown),
        2,
        figsize=(11, sum(heights) + 0.9),
        gridspec_kw={"height_ratios": heights, "width_ratios": (3, 2)},
        squeeze=False,
    )
    for (left, right), section in zip(axes, shown, strict=True):
        names = [figures.row for figures in section.rows]
        colours = [_colour(name) for name in names]
        ticks = list(range(len(names)))
        values = [figures.value for figures in section.rows]
        spread = [
            [f.value - f.low for f in section.rows],
            [f.high - f.value for f in section.rows],
        ]
        left.barh(ticks, values, xerr=spread, color=colours, capsize=2, error_kw={"lw": 0.8})
        left.set_yticks(ticks, names, fontsize=8)
        left.invert_yaxis()
        left.set_title(section_title(section, placement), fontsize=8.5, loc="left")
        left.set_xlabel(f"{section.workload.unit}, median (bars: min-max)", fontsize=8)
        ceiling = section.receiver_ceiling
        peer = {"upload": "sender", "ftp": "curl"}.get(section.workload.kind, "receiver")
        if ceiling is not None and ceiling < 2 * max(f.high for f in section.rows):
            left.axvline(ceiling, color="black", ls=":", lw=1)
            left.annotate(
                f"{peer} ceiling",
                (ceiling, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(-3, -3),
                textcoords="offset points",
                ha="right",
                va="top",
                fontsize=7,
            )
        server = [figures.cpu for figures in section.rows]
        right.barh(ticks, server, color=colours)
        # The receiver's share, hatched: on loopback the two split the kernel's TCP work.
        right.barh(
            ticks,
            [figures.receiver_cpu for figures in section.rows],
            left=server,
            color="white",
            edgecolor=colours,
            hatch="////",
            lw=0.5,
        )
        right.set_yticks(ticks, [""] * len(ticks))
        right.invert_yaxis()
        unit = "µs per response" if section.workload.kind == "requests" else "s per GiB"
        right.set_xlabel(f"CPU, {unit}: server, + {peer} hatched (lower is better)", fontsize=8)
        for ax in (left, right):
            ax.tick_params(axis="x", labelsize=7.5)
            ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"aiosendfile bench, {machine['date']}: {describe_machine(machine)}\n{command}",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=80)
    plt.close(fig)
    with open(path, "wb") as out:
        out.write(_small_png(image.getvalue()))


def _small_png(png: bytes) -> bytes:
    """The same picture in a 64-colour palette: a third of the bytes, for a README."""
    try:
        # Pillow comes with matplotlib.
        from PIL import Image  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return png
    with Image.open(io.BytesIO(png)) as picture:
        quantized = picture.convert("RGB").quantize(colors=64)
        out = io.BytesIO()
        quantized.save(out, format="png", optimize=True)
    return out.getvalue()


def _colour(row: str) -> str:
    name = row.removeprefix("tls-")
    if row in _COLOURS:
        return _COLOURS[row]
    # The framework rows (frameworks.py): the drop-in as aiosendfile, the stock as aiohttp's.
    if name.endswith("-dropin"):
        return _COLOURS["aiohttp-dropin"]
    if name.endswith("-stock"):
        return _COLOURS["aiohttp"]
    for prefix, colour in _COLOURS.items():
        if name.startswith(prefix):
            return colour
    return "#2ca02c"
