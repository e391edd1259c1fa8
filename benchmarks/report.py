"""Draw ``docs/benchmarks.png`` from ``docs/benchmarks.json``: ``python benchmarks/report.py IN.json OUT.png``.

Runs in the benchmark's tools venv (``benchmarks/.venv-otter``, which has matplotlib), not the app's venv.
Left: submit->verdict p50 (bar) and p95 (whisker) per runtime, cold vs warm (vs the docker backend when the
JSON has it), with the targets and Otter-Grader. Right: API latency p50/p99 under 100 simulated learners, for
the stress and the paced think times, cold vs warm, with the 50 ms target.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TARGETS_S = {"python": 0.15, "torch": 0.5, "tensorflow": 1.5}


def main(src: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data: dict[str, Any] = json.loads(src.read_text())
    modes = [m for m in ("cold", "warm", "docker") if "latency" in data.get(m, {})]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
    runtimes = list(TARGETS_S)
    width = 0.8 / max(1, len(modes) + ("otter" in data))
    for i, mode in enumerate(modes):
        lat = data[mode]["latency"]
        xs = [r + i * width for r in range(len(runtimes))]
        p50 = [lat.get(rt, {}).get("p50_s", float("nan")) for rt in runtimes]
        p95 = [lat.get(rt, {}).get("p95_s", float("nan")) for rt in runtimes]
        left.bar(xs, p50, width, label=f"gpulab {mode} (p50; whisker p95)")
        left.errorbar(xs, p50, yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p95, strict=True)]], fmt="none",
                      ecolor="black", capsize=3)  # fmt: skip
    otter = data.get("otter", {})
    if "p50_s" in otter:
        left.bar([len(modes) * width], [otter["p50_s"]], width, label="Otter-Grader `otter run` (p50)", color="grey")
    for r, rt in enumerate(runtimes):
        left.hlines(TARGETS_S[rt], r - width / 2, r + width * (len(modes) - 0.5), colors="red", linestyles="dashed")
    left.set_xticks([r + width * (len(modes) - 1) / 2 for r in range(len(runtimes))], runtimes)
    left.set_yscale("log")
    tallest = max([data[m]["latency"].get(rt, {}).get("p95_s", 0) for m in modes for rt in runtimes]
                  + [otter.get("p50_s", 0)])  # fmt: skip
    left.set_ylim(0.05, tallest * 8)  # room above the bars for the legend
    left.set_ylabel("submit -> verdict through the HTTP API (s, log)")
    left.set_title("Latency per submission (red dashes: targets)")
    left.legend(fontsize=8, loc="upper left", ncol=2)

    labels: list[str] = []
    for mode in ("cold", "warm"):
        for phase, model in (("api", "stress"), ("api_paced", "paced")):
            api = data.get(mode, {}).get(phase)
            if api is None:
                continue
            x = len(labels)
            right.bar([x - 0.2], [api["p50_ms"]], 0.4, color="tab:blue", label="p50" if x == 0 else None)
            right.bar([x + 0.2], [api["p99_ms"]], 0.4, color="tab:orange", label="p99" if x == 0 else None)
            labels.append(f"{mode}\n{model}")
    right.axhline(50, color="red", linestyle="dashed", label="p99 target 50 ms")
    right.set_xticks(range(len(labels)), labels, fontsize=8)
    right.set_yscale("log")
    right.set_ylim(top=max([data.get(m, {}).get(ph, {}).get("p99_ms", 50) for m in ("cold", "warm")
                            for ph in ("api", "api_paced")]) * 8)  # fmt: skip
    right.set_ylabel("API request latency (ms, log)")
    right.set_title("100 simulated learners (think 0.05-0.3 s / 1-5 s)", fontsize=10)
    right.legend(fontsize=8, loc="upper right")
    machine = data.get("machine", {})
    load = machine.get("loadavg_1min_during", {})
    fig.suptitle(
        f"gpulab benchmarks ({'quick' if data.get('quick') else 'full'} run {data.get('started', '')}; "
        f"{machine.get('cores')} cores, load avg {load.get('min', 0):.1f}-{load.get('max', 0):.1f} during the run)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
