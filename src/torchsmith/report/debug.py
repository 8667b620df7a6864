"""Render the debugging toolkit's results: gradient heatmap (PNG + HTML), NaN findings,
per-input gradcheck, graph nodes and breaks, OOM explanations."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from torchsmith.debug.grad_monitor import GradReport
from torchsmith.debug.gradcheck import GradcheckReport
from torchsmith.debug.graph import GraphReport
from torchsmith.debug.nan_sentinel import NonfiniteOrigin
from torchsmith.report.html import esc, figure_to_img, page, table
from torchsmith.text import first_line

# --- gradient monitor ----------------------------------------------------------------


def grad_heatmap(report: GradReport) -> Any:
    """A matplotlib figure: log10 gradient norm, layer (rows, input side on top) by step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.array(report.grad_norms, dtype=float).T  # (layers, steps)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(data > 0, np.log10(data), np.nan)
    fig, ax = plt.subplots(figsize=(min(14, 4 + 0.25 * len(report.steps)), min(24, 1.5 + 0.22 * len(report.layers))))
    image = ax.imshow(logs, aspect="auto", interpolation="nearest", cmap="viridis")
    whole_run = {f.layer: f.kind for f in report.flags if f.step is None}  # vanishing / no_grad: label the row
    ax.set_yticks(range(len(report.layers)),
                  labels=[f"{n} ({whole_run[n]})" if n in whole_run else n for n in report.layers], fontsize=7)
    for label, name in zip(ax.get_yticklabels(), report.layers, strict=True):
        if name in whole_run:
            label.set_color("red")
    ticks = list(range(0, len(report.steps), max(1, len(report.steps) // 12)))
    ax.set_xticks(ticks, labels=[str(report.steps[i]) for i in ticks])
    ax.set_xlabel("step")
    ax.set_title("log10 gradient norm per layer (red: flagged)")
    fig.colorbar(image, ax=ax, label="log10 |grad|")
    for flag in report.flags:  # a spike: box the cell
        if flag.step is not None and flag.step in report.steps:
            row = report.layers.index(flag.layer)
            ax.add_patch(plt.Rectangle((report.steps.index(flag.step) - 0.5, row - 0.5), 1, 1, fill=False, ec="red",
                                       lw=1.5))
    fig.tight_layout()
    return fig


def grad_png(report: GradReport) -> bytes:
    """The heatmap as PNG bytes (rendered once; written to a file and embedded in the HTML)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig = grad_heatmap(report)
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def grads_html(report: GradReport, title: str, png: bytes | None = None) -> str:
    flags = table(["layer", "kind", "step", "value", "reason"],
                  [(f.layer, f.kind, f.step if f.step is not None else "all", f"{f.value:.3g}", f.reason)
                   for f in report.flags])
    last = report.grad_norms[-1] if report.grad_norms else []
    layers = table(["layer", "last |grad|", "last |weight|"],
                   [(name, f"{g:.3g}", f"{w:.3g}") for name, g, w in
                    zip(report.layers, last, report.weight_norms[-1] if report.weight_norms else [], strict=False)],
                   numeric=(1, 2))
    return page(title, f"{len(report.layers)} layers, {len(report.steps)} recorded steps", [
        "<h2>Gradient norms</h2>",
        (f'<img alt="gradient norm heatmap" src="data:image/png;base64,{base64.b64encode(png).decode()}">' if png
         else figure_to_img(grad_heatmap(report), "gradient norm heatmap")),
        f"<h2>Flagged layers ({len(report.flags)})</h2>", flags if report.flags else "<p class=ok>none</p>",
        "<h2>Last recorded step</h2>", layers])


def render_grads(report: GradReport, console: Console) -> None:
    if not report.flags:
        console.print(f"[green]no flagged layers[/] ({len(report.layers)} layers, {len(report.steps)} recorded steps)")
        return
    t = Table(title="flagged layers")
    for col in ("layer", "kind", "step", "value", "reason"):
        t.add_column(col)
    for f in report.flags:
        t.add_row(f.layer, f.kind, str(f.step) if f.step is not None else "all", f"{f.value:.3g}", f.reason)
    console.print(t)


def grads_to_dict(report: GradReport) -> dict[str, Any]:
    clean = lambda rows: [[None if not math.isfinite(v) else v for v in r] for r in rows]  # noqa: E731
    return {"layers": report.layers, "steps": report.steps, "grad_norms": clean(report.grad_norms),
            "weight_norms": clean(report.weight_norms),
            "flags": [{**asdict(f), "value": f.value if math.isfinite(f.value) else None} for f in report.flags]}


# --- NaN sentinel ----------------------------------------------------------------------


def render_finding(finding: NonfiniteOrigin | None, console: Console, steps: int) -> None:
    if finding is None:
        console.print(f"[green]no NaN or Inf[/] in {steps} steps (forward, backward, gradients)")
        return
    t = Table(title=f"first non-finite value ({finding.kind})", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    rows = [("step", str(finding.step)), ("pass", finding.pass_), ("module", finding.module or "(root)"),
            ("op", finding.op or "-"), ("autograd node", finding.autograd_node or "-"),
            ("input shapes", str(finding.input_shapes)), ("output shapes", str(finding.output_shapes)),
            ("inputs already non-finite", {True: "no", False: "yes", None: "-"}[finding.inputs_finite])]
    if finding.own_code:
        rows[2] = ("module", f"{finding.module or '(root)'} (its own forward code)")
        rows += [("last finite child", finding.last_finite_child or "- (none ran before)"),
                 ("first non-finite child", f"{finding.first_nonfinite_child} (its inputs were already non-finite)")]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    if finding.reproduced is False:
        console.print("note: the op-level re-run of this step did not reproduce the value (the forward depends on "
                      "state the replay does not restore, e.g. a Python counter), so no op is named; the module "
                      "above is from the cheap per-module checks.")
    if finding.own_code:
        console.print(f"Tip: the value was made by code in {finding.module or 'the root module'}'s forward itself, "
                      f"between {finding.last_finite_child or 'its start'} and {finding.first_nonfinite_child}: "
                      "look there for a log/sqrt/div or an overflow.")
    elif finding.inputs_finite:
        console.print("Tip: the op's inputs were finite, so this op made the value: an overflow (lower the "
                      "learning rate, clip gradients, use bf16 over fp16) or an invalid input to it (log/sqrt/div).")
    elif finding.inputs_finite is False:
        console.print("Tip: the inputs were already non-finite: check the batch and the parameters "
                      "(a previous step may have written Inf into them).")


# --- gradcheck -----------------------------------------------------------------------


def render_gradcheck(report: GradcheckReport, console: Console) -> None:
    t = Table(title=f"gradcheck · {report.target} ({report.kind})")
    for col in ("input", "shape", "gradient", "max abs error", "max rel error", "worst element"):
        t.add_column(col, justify="right" if "error" in col else "left")
    for i in report.inputs:
        t.add_row(i.name, str(tuple(i.shape)), "[green]ok[/]" if i.ok else "[red]WRONG[/]",
                  f"{i.max_abs_error:.2e}", f"{i.max_rel_error:.2e}", str(i.worst_element))
    console.print(t)
    verdict = lambda v: "-" if v is None else ("[green]pass[/]" if v else "[red]fail[/]")  # noqa: E731
    console.print(f"gradcheck {verdict(report.gradcheck)} · gradgradcheck {verdict(report.gradgradcheck)}")
    for name, result in (report.opcheck or {}).items():
        ok = result in ("SUCCESS", "SKIPPED")
        console.print(f"opcheck {name}: {'[green]' if ok else '[red]'}{first_line(result)[:200]}[/]")
    for note in report.notes:
        console.print(f"[dim]{note}[/]")
    if report.wrong:
        console.print(f"[red]wrong gradient for: {', '.join(report.wrong)}[/] "
                      f"(backward vs finite differences, float64)")


# --- graph ---------------------------------------------------------------------------


def render_graph(report: GraphReport, console: Console, max_nodes: int = 60) -> None:
    if report.tracer is None:
        console.print(f"[red]could not trace[/]: fx: {report.fx_error}; torch.export: {report.export_error}")
    else:
        why = f" (fx failed: {report.fx_error})" if report.fx_error else ""
        console.print(f"traced with [bold]{report.tracer}[/]{why}")
        t = Table(title=f"graph · {len(report.nodes)} nodes · {report.total_flops / 1e9:.3f} GFLOP forward")
        for col in ("node", "module", "target", "shape", "FLOPs"):
            t.add_column(col, justify="right" if col == "FLOPs" else "left", overflow="fold")
        shown = [n for n in report.nodes if n.op != "get_attr"][:max_nodes]
        for n in shown:
            t.add_row(n.name, n.module or "(root)", n.target.removesuffix(".default"),
                      " ".join("x".join(map(str, s)) or "scalar" for s in n.shapes[:2]),
                      _fmt_flops(n.flops))
        console.print(t)
        hidden = len([n for n in report.nodes if n.op != "get_attr"]) - len(shown)
        if hidden > 0:
            console.print(f"[dim]... {hidden} more nodes (--max-nodes to show more, --json for all)[/]")
    if report.explain_error:
        console.print(f"[yellow]torch._dynamo.explain failed[/]: {report.explain_error}")
    elif report.graph_count is not None:
        n_breaks = len(report.graph_breaks)
        console.print(f"torch.compile: {report.graph_count} graph(s), {n_breaks} graph break(s)")
        for b in report.graph_breaks:
            console.print(f"  [yellow]break[/] {b.where}: {b.reason}")


def _fmt_flops(n: int) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n) if n else ""


def graph_to_dict(report: GraphReport) -> dict[str, Any]:
    return asdict(report)


def oom_html_section(report: Any) -> str:
    """An OOM report as an HTML fragment (memory split, largest tensors, ranked fixes)."""
    return ("<h2>Out of memory</h2>" + table(["part", "bytes"], [
        ("parameters", report.params), ("gradients", report.grads), ("optimizer state", report.optimizer_state),
        ("activations", report.activations)], numeric=(1,))
        + table(["fix", "saves (bytes)", "how"], [(f.name, f.saving_bytes, f.how) for f in report.fixes], numeric=(1,))
        + f"<p>{esc(report.note)}</p>")


# --- progress ------------------------------------------------------------------------


@contextmanager
def step_progress(description: str, total: int, quiet: bool = False) -> Iterator[Callable[[], None]]:
    """A rich progress bar over ``total`` steps; yields ``advance()``. ``quiet`` renders nothing."""
    if quiet:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from torchsmith.report.console import console

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task(description, total=total)
    with progress:
        yield lambda: progress.advance(task)
