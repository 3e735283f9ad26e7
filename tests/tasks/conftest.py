"""Shared fixtures for task tests: no network, and an empty private data directory."""

import socket

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "network_attempt_expected: the test checks a refused download")


class NetworkUsed(OSError):
    pass


@pytest.fixture(autouse=True)
def no_network(monkeypatch, request):
    """Every connection attempt fails and is recorded; tests fail if one happened unexpectedly."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise NetworkUsed("network access is disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts
    if not request.node.get_closest_marker("network_attempt_expected"):
        assert not attempts, f"a test tried to use the network: {attempts}"


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path_factory, monkeypatch):
    """LTDRNN_DATA points at an empty directory so the user's cache is never read."""
    path = tmp_path_factory.mktemp("ltdrnn_data")
    monkeypatch.setenv("LTDRNN_DATA", str(path))
    return path
