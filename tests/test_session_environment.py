"""Session reads proxies from the environment as requests does, without scanning it when no
variable can name one: the same settings, and a variable set or removed at any time is
honoured on the next request."""

from __future__ import annotations

import os
import urllib.request
from typing import Dict, Iterator, List, Optional

import pytest
import requests

from watchdog_sync import Session, WatchdogError, stream_sse

from .rawserver import Answer, RawServer

pytestmark = pytest.mark.timeout(30)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
# An address no test serves: a request for it that reaches a server went through the proxy.
UNSERVED = "http://127.0.0.2:9/through-the-proxy"


@pytest.fixture
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The environment without any variable that could name or bypass a proxy."""
    for name in list(os.environ):
        if "_proxy" in name.lower():
            monkeypatch.delenv(name)
    assert urllib.request.getproxies_environment() == {}
    yield monkeypatch


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"HOME_PROXYISH": "no"},  # "_proxy" inside a name: requests' own look decides
        {"http_proxy": "http://127.0.0.1:1"},
        {"HTTPS_PROXY": "http://127.0.0.1:1"},
        {"ALL_PROXY": "http://127.0.0.1:1", "NO_PROXY": "127.0.0.1"},
        {"no_proxy": "*"},
        {"http_proxy": ""},  # set but empty: no proxy
    ],
)
def test_the_look_is_skipped_only_when_no_variable_can_name_a_proxy(
    no_proxy_variables: pytest.MonkeyPatch, variables: Dict[str, str]
) -> None:
    for name, value in variables.items():
        no_proxy_variables.setenv(name, value)
    looks = _counted_looks(no_proxy_variables)
    Session().merge_environment_settings("http://127.0.0.1:1/v1", {}, True, None, None)
    assert bool(looks) is any("_proxy" in name.lower() for name in variables)


def _counted_looks(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The URLs requests' environment look (``get_environ_proxies``) is asked about, from now."""
    looks: List[str] = []
    real = requests.sessions.get_environ_proxies

    def counted(url: str, no_proxy: Optional[str] = None) -> Dict[str, str]:
        looks.append(url)
        return real(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    return looks


@pytest.mark.parametrize("variables", [{}, {"https_proxy": "http://127.0.0.1:1"}])
@pytest.mark.parametrize(
    "bundle", [{}, {"REQUESTS_CA_BUNDLE": "/ca/requests.pem"}, {"CURL_CA_BUNDLE": "/ca/curl.pem"}]
)
@pytest.mark.parametrize("proxies", [None, {}, {"http": "http://127.0.0.1:2", "no_proxy": "x"}])
@pytest.mark.parametrize("verify", [None, True, False, "/ca/mine.pem"])
@pytest.mark.parametrize("trust_env", [True, False])
def test_the_settings_are_requests_own(
    no_proxy_variables: pytest.MonkeyPatch,
    variables: Dict[str, str],
    bundle: Dict[str, str],
    proxies: Optional[Dict[str, str]],
    verify: object,
    trust_env: bool,
) -> None:
    for name, value in {**variables, **bundle}.items():
        no_proxy_variables.setenv(name, value)
    ours, theirs = Session(), requests.Session()
    for session in (ours, theirs):
        session.trust_env = trust_env
        session.proxies = {"ftp": "http://127.0.0.1:3"}
        session.cert = "/certs/client.pem"
    url = "https://127.0.0.1:8443/v1/chat"

    def settings(session: requests.Session) -> object:
        return session.merge_environment_settings(
            url, None if proxies is None else dict(proxies), True, verify, None
        )

    assert settings(ours) == settings(theirs)


def test_a_proxy_named_after_the_session_was_made_is_used_and_dropped(
    no_proxy_variables: pytest.MonkeyPatch,
) -> None:
    answer = Answer(lambda path: OK)
    with RawServer(answer) as proxy, Session() as session:
        assert session.get(f"{proxy.url}/direct", timeout=5).text == "ok"
        no_proxy_variables.setenv("http_proxy", proxy.url)
        assert session.get(UNSERVED, timeout=5).text == "ok"
        no_proxy_variables.delenv("http_proxy")
        with pytest.raises(requests.ConnectionError):
            session.get(UNSERVED, timeout=5)
    assert answer.paths == [b"/direct", UNSERVED.encode()]


def test_no_proxy_still_sends_its_hosts_direct(no_proxy_variables: pytest.MonkeyPatch) -> None:
    direct, proxied = Answer(lambda path: OK), Answer(lambda path: OK)
    with RawServer(direct) as server, RawServer(proxied) as proxy, Session() as session:
        no_proxy_variables.setenv("HTTP_PROXY", proxy.url)
        no_proxy_variables.setenv("NO_PROXY", "127.0.0.1")
        assert session.get(f"{server.url}/direct", timeout=5).text == "ok"
    assert direct.paths == [b"/direct"]
    assert proxied.paths == []


def test_a_request_does_not_scan_an_environment_without_proxies(
    no_proxy_variables: pytest.MonkeyPatch,
) -> None:
    looks = _counted_looks(no_proxy_variables)
    with RawServer(Answer(lambda path: OK)) as server:
        with Session() as session:
            session.get(f"{server.url}/ours", timeout=5)
        assert looks == []
        with requests.Session() as session:
            session.get(f"{server.url}/plain", timeout=5)
        assert looks == [f"{server.url}/plain"]
        no_proxy_variables.setenv("no_proxy", "example.invalid")
        with Session() as session:
            session.get(f"{server.url}/named", timeout=5)
        assert looks == [f"{server.url}/plain", f"{server.url}/named"]


@pytest.mark.parametrize("how", ["replaced", "patched"])
def test_a_replaced_environment_routes_like_plain_requests(
    no_proxy_variables: pytest.MonkeyPatch, how: str
) -> None:
    """os.environ replaced by a mapping that names a proxy (os.environb still the real,
    proxy-less environment), or patched in place: Session, stream_sse and plain requests
    all go through the proxy."""
    proxied = Answer(lambda path: OK)
    with RawServer(proxied) as proxy:
        if how == "replaced":
            no_proxy_variables.setattr(os, "environ", {**os.environ, "HTTP_PROXY": proxy.url})
        else:
            no_proxy_variables.setitem(os.environ, "HTTP_PROXY", proxy.url)
        with requests.Session() as plain:
            assert plain.get(UNSERVED + "/plain", timeout=5).text == "ok"
        with Session() as session:
            assert session.get(UNSERVED + "/ours", timeout=5).text == "ok"
        with pytest.raises(WatchdogError):  # the proxy's answer is no event stream
            list(stream_sse(UNSERVED + "/stream", method="GET", idle_timeout=5))
    assert proxied.paths == [
        (UNSERVED + "/plain").encode(),
        (UNSERVED + "/ours").encode(),
        (UNSERVED + "/stream").encode(),
    ]
