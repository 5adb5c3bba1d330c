"""Study figures (matplotlib, imported lazily, Agg backend).

* ``heatmap.png``: per topic, log10 |M(t, p)| with M(t, p) = Σ_{i ∈ bin p} φ_{i,t} over 100 equal-size
  follower-percentile bins (top row = top 1 %) × days, full panel, f_heat; dashed lines at the tier
  boundaries (1 %, 10 %), a marker on the peak day (argmax Φ_t).
* ``teaser.png``: three-tier shares of the biased small panel (BIAS_v at the headline N, mean over
  seeds) vs the full panel, f_heat, for the first topic (mythos when present).

Figures of a SYNTHETIC run say so in their titles.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.bluesky.counts import TIER_LABELS
from aumann.io import atomic_path
from aumann.studies.plotting import plain_text_figures, pyplot


def _plt():
    return pyplot()


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    return path


@plain_text_figures
def write_figures(cells: list[dict[str, Any]], out: str | os.PathLike[str], *, synthetic: bool,
                  headline_size: int = 100) -> list[Path]:
    """Write the heatmap and teaser figures; returns their paths."""
    out = Path(out)
    plt = _plt()
    tag = " — SYNTHETIC panel" if synthetic else ""
    paths: list[Path] = []
    fulls = [c for c in cells if c["protocol"] == "FULL" and "daily" in c]
    if fulls:
        fig, axes = plt.subplots(1, len(fulls), figsize=(3.8 * len(fulls), 4.4), squeeze=False)
        fig.subplots_adjust(wspace=0.55)
        for ax, c in zip(axes[0], fulls):
            d = c["daily"]
            m = np.abs(np.asarray(d["heatmap_M"], dtype=np.float64)).T  # (bins, days)
            with np.errstate(divide="ignore"):
                img = np.where(m > 0, np.log10(np.where(m > 0, m, 1.0)), np.nan)
            im = ax.imshow(img, aspect="auto", cmap="magma", origin="upper", interpolation="nearest")
            for b in (1, 10):
                ax.axhline(b - 0.5, color="cyan", lw=0.8, ls="--")
            ax.plot([d["peak_index"]], [-0.5], marker="v", color="lime", ms=8, clip_on=False)
            ax.set_title(f"{c['topic']}\npeak {d['peak_day']}", fontsize=9)
            ticks = list(range(0, len(d["days"]), 3))
            ax.set_xticks(ticks, [d["days"][i][5:] for i in ticks], fontsize=7, rotation=45)
            ax.set_yticks([0, 9, 49, 99], ["top 1%", "10%", "50%", "100%"], fontsize=7)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)
        fig.suptitle(f"log10 |M(t, p)|: f_heat attribution by follower-percentile bin × day{tag}", fontsize=10, y=1.04)
        paths.append(_save(fig, out / "heatmap.png"))
        plt.close(fig)

    topics = [c["topic"] for c in cells if c["protocol"] == "FULL"]
    if topics:
        t0 = "mythos" if "mythos" in topics else topics[0]
        full = next(c for c in cells if c["protocol"] == "FULL" and c["topic"] == t0)
        bias = next((c for c in cells if c["topic"] == t0 and c["protocol"] == "BIAS_visibility"
                     and c["size"] == headline_size), None)
        if bias is not None and "heat" in full["ind"]:
            vals = [[r["ind"]["heat"]["R"][k] for r in bias["seeds"] if "R" in r["ind"]["heat"]] for k in TIER_LABELS]
            b_mean = [100 * float(np.mean(v)) if v else np.nan for v in vals]
            b_std = [100 * float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in vals]
            f_vals = [100 * full["ind"]["heat"]["R"][k] for k in TIER_LABELS]
            fig, ax = plt.subplots(figsize=(5.2, 3.4))
            x = np.arange(3)
            ax.bar(x - 0.2, b_mean, 0.4, yerr=b_std, label=f"BIAS_v, N = {headline_size}", color="#d95f02")
            ax.bar(x + 0.2, f_vals, 0.4, label=f"FULL, N = {full['size']:,}", color="#1b9e77")
            ax.set_xticks(x, ["top 1 %", "next 9 %", "bottom 90 %"])
            ax.set_ylabel("share of attribution R_G (%)")
            ax.set_title(f"{t0}, f_heat: small biased panel vs full{tag}", fontsize=9)
            ax.legend(fontsize=8)
            paths.append(_save(fig, out / "teaser.png"))
            plt.close(fig)
    return paths


__all__ = ["write_figures"]
