"""Dependencies run one way (dataplane <- gateway <- api): the control plane is usable
without the HTTP layer, e.g. by the CLI's token commands."""

from __future__ import annotations

import subprocess
import sys


def test_the_control_plane_imports_nothing_from_api() -> None:
    probe = (
        "import sys, gateway.control, gateway.control.plane, gateway.store;"
        "print(sorted(m for m in sys.modules if m == 'api' or m.startswith('api.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
