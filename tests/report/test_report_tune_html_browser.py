"""The HTML report opens offline in a real browser, renders its charts, and looks right."""

import shutil
import subprocess

import pytest

from torchsmith.report.tune_html import write_tune_report
from torchsmith.tuner import tune

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    result = tune("mlp", budget="40s", knobs=["threads", "optimizer"], out=out / "plan.json")
    assert write_tune_report(result, out / "report.html") == out / "report.html"
    return result, out


@pytest.mark.slow
def test_report_is_self_contained(report):
    result, out = report
    html = (out / "report.html").read_text()
    assert (out / "plan.json").exists()
    assert html.count("data:image/png;base64,") >= 3  # throughput, memory, loss charts embedded
    assert "http://" not in html and "https://" not in html  # nothing to fetch: opens offline
    for needle in ("Throughput per candidate", "Peak memory per candidate", "Rejected and failed", "Machine",
                   result.fingerprint.torch_version):
        assert needle in html


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it as root)")
def test_report_renders_in_headless_chromium(report, tmp_path):
    _, out = report
    url = (out / "report.html").as_uri()
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run([CHROMIUM, *FLAGS, *profile, "--virtual-time-budget=5000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The page's own check: every embedded chart decoded (no broken images).
    assert 'data-render-check="ok"' in dom.stdout, dom.stdout[:500]
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, *profile, "--window-size=1200,1600", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=120, check=True)
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    assert pixels.std() > 0.05  # not a blank page: text and charts rendered
    shutil.copy(shot, out / "report.png")
