"""The end-to-end redaction runs' fixtures: the app's HTTP peer and the OTLP receiver, on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from tests.support.autoinstrument import Target

from harness.receiver import OtlpReceiver


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started
