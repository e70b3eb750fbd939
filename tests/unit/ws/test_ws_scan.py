"""The frame scanner and masker: C (ws_scan.c) and pure Python give identical results."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ws_helpers import BACKENDS, server_frame

from dataplane.ws.scan import (
    MASKED,
    UINT64_MAX,
    BackendName,
    PyScanner,
    make_scanner,
    mask_inplace_py,
    mask_py,
    masker,
    resolve,
    scan_frames,
)

needs_c = pytest.mark.skipif(resolve("auto") != "c", reason="the C shim is not built")


def scan_all(
    scanner_backend: BackendName, buf: bytes, max_frames: int = 128
) -> tuple[list[int], int, int, int]:
    """Scan to the end, following the max_frames cap like the client does."""
    scanner = make_scanner(scanner_backend, max_frames)
    words: list[int] = []
    start = 0
    while True:
        got, start, need, pending = scanner.scan(buf, start)
        words += got
        if len(got) < 4 * max_frames:
            return words, start, need, pending


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_describes_each_frame(backend: BackendName) -> None:
    buf = (
        server_frame(1, b"hi")
        + server_frame(2, b"x" * 126)
        + server_frame(0, b"y" * 70000, fin=False, rsv=4)
        + server_frame(9, b"pp", mask=b"\x01\x02\x03\x04")
    )
    words, consumed, need, pending = scan_all(backend, buf)
    assert consumed == len(buf) and need == 0 and pending == UINT64_MAX
    frames = [words[i : i + 4] for i in range(0, len(words), 4)]
    assert frames[0] == [0x81 | 2 << 16, 2, 2, 0]
    assert frames[1] == [0x82 | 4 << 16, 4 + 4, 126, 0]
    third = 4 + 4 + 126
    assert frames[2] == [0x40 | 10 << 16, third + 10, 70000, 0]
    fourth = third + 10 + 70000
    assert frames[3] == [0x89 | MASKED | 6 << 16, fourth + 6, 2, 0x04030201]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("prefix", "need", "pending"),
    [
        (b"\x81", 2, UINT64_MAX),
        (b"\x81\x7e\x00", 4, UINT64_MAX),
        (b"\x81\xfe\x00\x80\x01\x02", 8, UINT64_MAX),
        (b"\x81\x7f" + b"\x00" * 7, 10, UINT64_MAX),
        (b"\x81\x05abc", 7, 5),
        (b"\x82\x7f" + (2**40).to_bytes(8, "big"), 2**40 + 10, 2**40),
        (b"\x82\xff" + UINT64_MAX.to_bytes(8, "big") + b"kkkk", UINT64_MAX, UINT64_MAX),
    ],
)
def test_scan_reports_what_an_incomplete_frame_needs(
    backend: BackendName, prefix: bytes, need: int, pending: int
) -> None:
    whole = server_frame(1, b"ok")
    words, consumed, got_need, got_pending = scan_all(backend, whole + prefix)
    assert len(words) == 4 and consumed == len(whole)
    assert (got_need, got_pending) == (need, pending)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_stops_at_max_frames_and_resumes_from_start(backend: BackendName) -> None:
    buf = server_frame(1, b"a") * 10
    scanner = make_scanner(backend, 4)
    words, consumed, need, _ = scanner.scan(buf, 0)
    assert len(words) == 16 and consumed == 12 and need == 0
    words, consumed, _, _ = scanner.scan(buf, consumed)
    assert words[1] == 12 + 2 and consumed == 24


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_rejects_a_start_beyond_the_buffer(backend: BackendName) -> None:
    with pytest.raises(ValueError, match="scan"):
        make_scanner(backend).scan(b"\x81\x00", 3)


def frame_sequences() -> st.SearchStrategy[bytes]:
    one = st.builds(
        server_frame,
        st.integers(0, 15),
        st.binary(max_size=300),
        fin=st.booleans(),
        rsv=st.integers(0, 7),
        mask=st.none() | st.binary(min_size=4, max_size=4),
        long_form=st.sampled_from([None, 126, 127]),
    )
    return st.lists(one, max_size=12).map(b"".join)


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame_sequences(), st.data())
def test_c_and_python_scan_agree_on_frames_split_anywhere(buf: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(buf)))
    start = data.draw(st.integers(0, cut))
    max_frames = data.draw(st.integers(1, 16))
    piece = buf[:cut]
    assert make_scanner("c", max_frames).scan(piece, start) == PyScanner(max_frames).scan(
        piece, start
    )
    # And as the client sees a stream: scan, keep the rest, append the next piece.
    pending = b""
    for chunk in (buf[:cut], buf[cut:]):
        pending += chunk
        c = scan_all("c", pending)
        py = scan_all("python", pending)
        assert c == py
        pending = pending[c[1] :]


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000))
def test_c_and_python_scan_agree_on_arbitrary_bytes(buf: bytes) -> None:
    assert make_scanner("c").scan(buf, 0) == scan_frames(buf)


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(min_size=4, max_size=4), st.integers(0, 7))
def test_c_and_python_mask_agree(data: bytes, key: bytes, phase: int) -> None:
    from dataplane.shim import ws_mask_copy, ws_mask_inplace, ws_mask_into

    expected = mask_py(data, key, phase)
    assert ws_mask_copy(data, key, phase) == expected
    buf = bytearray(data)
    ws_mask_inplace(buf, key, phase)
    assert bytes(buf) == expected
    frame = bytearray(3 + len(data))
    ws_mask_into(frame, 3, data, key)
    assert bytes(frame[3:]) == mask_py(data, key)


def test_mask_is_its_own_inverse_and_phase_continues_a_payload() -> None:
    data = os.urandom(1001)
    key = os.urandom(4)
    masked = mask_py(data, key)
    assert mask_py(masked, key) == data
    # Unmasking in two pieces: the second continues at phase len(first) % 4.
    assert mask_py(masked[:7], key) + mask_py(masked[7:], key, 7) == data
    buf = bytearray(masked)
    mask_inplace_py(buf, key)
    assert bytes(buf) == data
    assert mask_py(b"", key) == b""


@pytest.mark.parametrize("backend", BACKENDS)
def test_masker_switches_to_c_for_large_payloads_with_the_same_result(backend: BackendName) -> None:
    mask = masker(backend)
    key = b"\xaa\x55\x0f\xf0"
    for size in (0, 5, 511, 512, 4096):
        data = os.urandom(size)
        assert mask(data, key) == mask_py(data, key)


def test_backend_override_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WSGW_WS_SCAN", "python")
    assert resolve("auto") == "python"
    assert isinstance(make_scanner(), PyScanner)
