import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
ROOT = pathlib.Path(__file__).resolve().parents[2]
# The package from the build's python/ folder when PYTHONPATH does not name one.
if not any(pathlib.Path(p, "lnverify").is_dir() for p in sys.path if p):
    sys.path.insert(0, str(ROOT / "build" / "python"))
os.environ.setdefault("LNVERIFY_CLI", str(ROOT / "build" / "cli" / "lnverify"))
