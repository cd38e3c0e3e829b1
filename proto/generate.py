"""Regenerate host/devicehost/_proto from proto/*.proto (run by `make proto`).

grpcio-tools writes the messages and services; mypy-protobuf writes the .pyi stubs.
protoc emits top-level imports (``from deviceplugin.v1beta1 import api_pb2``); they are
rewritten to the package path so the modules import from anywhere. Pass ``--out DIR``
to write elsewhere (the staleness test compares such a fresh run with the committed files).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
DEFAULT_OUT = ROOT / "host" / "devicehost" / "_proto"
PACKAGE = "devicehost._proto"
SOURCES = [
    "deviceplugin/v1beta1/api.proto",
    "podresources/v1/api.proto",
    "pluginregistration/v1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "dra-health/v1/api.proto",
    "dra-health/v1alpha1/api.proto",
]
IMPORT_RE = re.compile(
    r"^(import|from) (deviceplugin|podresources|pluginregistration|dra|dra_health)\b", re.MULTILINE
)


def generate(out: Path) -> None:
    # protoc finds its mypy plugins (protoc-gen-mypy) on PATH: put this interpreter's
    # scripts first, so a plain `.venv/bin/pytest` or `python proto/generate.py` works
    # without activating the venv.
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join([scripts, os.environ.get("PATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *SOURCES,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
    for path in out.rglob("*.py*"):
        text = IMPORT_RE.sub(rf"\1 {PACKAGE}.\2", path.read_text())
        path.write_text(text)
    for directory in [out, *(p for p in out.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    generate(parser.parse_args().out)


if __name__ == "__main__":
    sys.exit(main())
