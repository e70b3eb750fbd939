"""`Lab.client_threads`: a thread started inside the block lives in the lab's twin namespace
(its kernel sockets reach the peer from the twin's address), and the calling
thread is back in its own namespace afterwards, also when the block raises."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from gateway.lab import Lab
from tests.conftest import fresh_lab, requires_root

pytestmark = requires_root

LISTENER = (
    "import socket; s = socket.create_server(('0.0.0.0', 9471)); print('ready', flush=True); "
    "c, a = s.accept(); print(a[0], flush=True)"
)


def _netns() -> str:
    return os.readlink("/proc/thread-self/ns/net")


@pytest.fixture
def twin_lab() -> Iterator[Lab]:
    with fresh_lab(f"tt{os.getpid() % 100000}", kernel_client=True) as made:
        yield made


def test_threads_started_inside_reach_the_peer_from_the_twin(twin_lab: Lab) -> None:
    own = _netns()
    peer = twin_lab.popen(["python3", "-c", LISTENER], stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"
        seen: dict[str, object] = {}

        def connect() -> None:
            seen["netns"] = _netns()
            try:
                with socket.create_connection((twin_lab.peer_client_ip, 9471), timeout=5):
                    seen["connected"] = True
            except OSError as exc:
                seen["connected"] = exc

        with twin_lab.client_threads():
            inside = _netns()
            thread = threading.Thread(target=connect)
            thread.start()
        assert _netns() == own != inside
        thread.join(10)
        assert seen == {"netns": inside, "connected": True}
        assert peer.stdout.readline().strip() == twin_lab.client_ip  # from the twin's address
    finally:
        peer.kill()
        peer.wait()


def test_the_calling_thread_is_restored_when_the_block_raises(twin_lab: Lab) -> None:
    own = _netns()
    inside: list[str] = []

    def fail_inside() -> None:
        with twin_lab.client_threads():
            inside.append(_netns())
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fail_inside()
    assert inside and inside[0] != own
    assert _netns() == own
