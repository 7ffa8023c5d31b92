"""Behind a reverse proxy the login throttle counts each client, not the
proxy: X-Forwarded-For is believed from LLMGW_TRUSTED_PROXIES only."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from llmgw import env

PASSWORD = "a-long-test-password"
PROXY = "10.9.0.1"


@pytest.fixture(autouse=True)
def no_failed_logins() -> Any:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def behind_proxy(settings: Any) -> None:
    settings.TRUSTED_PROXIES = (ipaddress.ip_network("10.9.0.0/24"),)


def _token(forwarded: str, password: str, username: str = "ops", remote: str = PROXY) -> int:
    answer = APIClient().post(
        "/api/v1/token",
        {"username": username, "password": password},
        format="json",
        REMOTE_ADDR=remote,
        HTTP_X_FORWARDED_FOR=forwarded,
    )
    return answer.status_code


@pytest.mark.django_db
def test_one_guesser_behind_the_proxy_locks_out_no_one_else(operator, behind_proxy):
    for i in range(50):
        assert _token("203.0.113.7", "guess", username=f"u{i}") == 400
    assert _token("203.0.113.7", PASSWORD) == 429
    # Another client through the same proxy logs in.
    assert _token("203.0.113.8", PASSWORD) == 200


@pytest.mark.django_db
def test_an_address_the_client_wrote_is_not_believed(operator, behind_proxy):
    # The proxy appends the address it saw; whatever stands left of it the
    # client sent, a fresh one each try, and it buys no more guesses.
    for i in range(10):
        assert _token(f"198.51.100.{i}, 203.0.113.7", "guess") == 400
    assert _token("192.0.2.1, 203.0.113.7", PASSWORD) == 429
    # Two proxies in a row, both trusted: the client is the hop before them.
    assert _token("203.0.113.7, 10.9.0.2", PASSWORD) == 429
    assert _token("203.0.113.9, 10.9.0.2", PASSWORD) == 200


@pytest.mark.django_db
def test_without_trusted_proxies_the_header_is_ignored(operator):
    for i in range(10):
        assert _token(f"198.51.100.{i}", "guess", remote="203.0.113.7") == 400
    assert _token("198.51.100.99", PASSWORD, remote="203.0.113.7") == 429


def test_a_bad_proxy_address_names_the_setting(monkeypatch):
    monkeypatch.setenv("LLMGW_TRUSTED_PROXIES", "10.0.0.1, proxy.internal")
    with pytest.raises(ImproperlyConfigured) as refused:
        env.networks("LLMGW_TRUSTED_PROXIES")
    assert str(refused.value) == (
        "LLMGW_TRUSTED_PROXIES: 'proxy.internal' is not an IP address or network "
        "(10.0.0.1, 10.0.0.0/24)"
    )
    monkeypatch.setenv("LLMGW_TRUSTED_PROXIES", "10.0.0.0/24, ::1")
    assert [str(n) for n in env.networks("LLMGW_TRUSTED_PROXIES")] == ["10.0.0.0/24", "::1/128"]
