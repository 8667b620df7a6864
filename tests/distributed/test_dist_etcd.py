"""A 2-process run whose rendezvous goes through a real etcd server (v2 API) on loopback.

Needs Debian's ``etcd-server`` (``apt-get install -y etcd-server``) and the ``python-etcd``
client (``pip install 'torchsmith[etcd]'``); skipped with the reason where either is missing.
With ``TORCHSMITH_ETCD_ENDPOINT=HOST:PORT`` it uses that server instead of starting one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from dist_helpers import HERE

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def etcd_endpoint(tmp_path_factory):
    pytest.importorskip("etcd", reason="python-etcd is not installed (pip install 'torchsmith[etcd]')")
    if os.environ.get("TORCHSMITH_ETCD_ENDPOINT"):
        yield os.environ["TORCHSMITH_ETCD_ENDPOINT"]
        return
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("no etcd binary on PATH (Debian: apt-get install -y etcd-server)")
    client, peer = _free_port(), _free_port()
    data = tmp_path_factory.mktemp("etcd")
    proc = subprocess.Popen(
        [binary, "--data-dir", str(data), "--enable-v2=true",
         "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                # The v2 keys API answers only when --enable-v2 took effect (etcd >= 3.6 dropped it).
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/v2/keys/", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip(f"etcd at 127.0.0.1:{client} does not serve the v2 API (exit code {proc.poll()})")
                time.sleep(0.3)
        yield f"127.0.0.1:{client}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_two_process_run_through_an_etcd_v2_rendezvous(tmp_path, etcd_endpoint):
    from dist_helpers import torchrun_cfg

    out = tmp_path / "out"
    proc = torchrun_cfg(dict(rdzv_backend="etcd-v2", rdzv_endpoint=etcd_endpoint, rdzv_id=f"test-{os.getpid()}"),
                        [str(HERE / "dist_run_worker.py")], ["dist_fault_workload:workload", str(out), "--steps", "3"])
    assert proc.returncode == 0, proc.stdout[-6000:]
    results = [json.loads((out / f"rank{r}_attempt0.json").read_text()) for r in (0, 1)]
    assert results[0]["losses"] == results[1]["losses"] and len(results[0]["losses"]) == 3
    assert "parallel: DDP over 2 ranks" in " ".join(results[0]["changes"])
