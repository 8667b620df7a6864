import os
import sys
from pathlib import Path

# Tests share small helper modules (toy workloads) by plain import.
for sub in ("engine",):
    sys.path.insert(0, str(Path(__file__).parent / sub))

# Keep the peak-FLOP/s cache and other state out of the user's home during tests.
os.environ.setdefault("TORCHSMITH_CACHE_DIR", str(Path(__file__).parent.parent / ".pytest_cache" / "torchsmith"))
