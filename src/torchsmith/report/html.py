"""Self-contained HTML pages: inline CSS, charts as embedded PNG data URIs, no network.

A tiny inline script marks any chart that failed to decode, so a broken report says so
on the page (and a browser test can check ``data-render-check`` on ``<body>``).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import Any

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1100px;color:#1f2328;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
.sub{color:#59636e;margin-top:0} table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.5rem 0}
th,td{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top} th{background:#f6f8fa}
td.num{text-align:right;font-variant-numeric:tabular-nums} img{max-width:100%;height:auto}
.kpi{display:flex;gap:1rem;flex-wrap:wrap} .kpi div{border:1px solid #d0d7de;border-radius:6px;padding:.6rem 1rem;min-width:10rem}
.kpi b{display:block;font-size:1.4rem} .ok{color:#1a7f37} .bad{color:#cf222e} .warn{color:#9a6700}
pre{background:#f6f8fa;padding:.8rem;overflow-x:auto;font-size:.85rem}
"""  # noqa: E501 - CSS rules kept one per line, as written

_CHECK = """
<script>
window.addEventListener('load', function () {
  var broken = Array.from(document.images).filter(function (i) { return !i.complete || i.naturalWidth === 0; });
  broken.forEach(function (i) { var p = document.createElement('p'); p.className = 'bad';
    p.textContent = 'This chart failed to render: ' + (i.alt || 'image'); i.replaceWith(p); });
  document.body.dataset.renderCheck = broken.length ? 'broken-images:' + broken.length : 'ok';
});
</script>
"""


def esc(value: Any) -> str:
    return html.escape(str(value))


def figure_to_img(fig: Any, alt: str) -> str:
    """A matplotlib figure as an ``<img>`` with an embedded PNG, then closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{esc(v)}</td>' if i in numeric else f"<td>{esc(v)}</td>"
                        for i, v in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def page(title: str, subtitle: str, sections: Iterable[str]) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{_CSS}</style></head>"
            f"<body><h1>{esc(title)}</h1><p class=sub>{esc(subtitle)}</p>{''.join(sections)}{_CHECK}</body></html>")


def fingerprint_table(fp: Any) -> str:
    """The machine a report's numbers were measured on."""
    from dataclasses import asdict

    return table(["", ""], [(k.replace("_", " "), v) for k, v in asdict(fp).items()])
