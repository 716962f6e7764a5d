"""The dashboard's guard on its action route (edgeagent.fleet.actions): a POST is acted on only when it carries
the page's token and comes from the dashboard's own origin (issue 36)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as hs

from edgeagent.fleet.actions import TOKEN_HEADER, VERBS, bad_target, cross_site_refusal, new_token

HOST = "127.0.0.1:8080"
TOKEN = "k" * 43

_ORIGINS = hs.one_of(hs.none(), hs.sampled_from([
    "http://127.0.0.1:8080", "HTTP://127.0.0.1:8080", "http://127.0.0.1:8081", "http://localhost:8080",
    "https://127.0.0.1:8080", "http://127.0.0.1", "null", "", "http://127.0.0.1:8080/", "https://attacker.example"]))
_SITES = hs.one_of(hs.none(), hs.sampled_from(["same-origin", "Same-Origin", "same-site", "cross-site", "none", ""]))
_TOKENS = hs.one_of(hs.none(), hs.sampled_from([TOKEN, TOKEN.upper(), TOKEN[:-1], TOKEN + "k", "", " " + TOKEN]),
                    hs.text(max_size=50))


@given(origin=_ORIGINS, site=_SITES, token=_TOKENS)
def test_only_the_pages_own_token_from_its_own_origin_is_accepted(origin: str | None, site: str | None,
                                                                  token: str | None) -> None:
    headers = {k: v for k, v in (("Origin", origin), ("Sec-Fetch-Site", site), (TOKEN_HEADER, token))
               if v is not None}
    refusal = cross_site_refusal(headers, HOST, TOKEN)
    accepted = (origin is not None and origin.lower() == f"http://{HOST}" and site in (None, "same-origin",
                                                                                        "Same-Origin")
                and token == TOKEN)
    assert (refusal is None) == accepted, (headers, refusal)
    if refusal is not None:
        assert refusal.startswith("refused: ") and "\n" not in refusal


def test_each_refusal_says_which_check_failed() -> None:
    own = {"Origin": f"http://{HOST}", "Sec-Fetch-Site": "same-origin", TOKEN_HEADER: TOKEN}
    assert cross_site_refusal(own, HOST, TOKEN) is None
    assert "no Origin header" in str(cross_site_refusal({k: v for k, v in own.items() if k != "Origin"}, HOST, TOKEN))
    assert "comes from http://127.0.0.1:9" in str(cross_site_refusal({**own, "Origin": "http://127.0.0.1:9"}, HOST,
                                                                     TOKEN))
    assert "is cross-site (Sec-Fetch-Site)" in str(cross_site_refusal({**own, "Sec-Fetch-Site": "cross-site"}, HOST,
                                                                      TOKEN))
    assert "no X-Edgeagent-Token header" in str(cross_site_refusal(
        {k: v for k, v in own.items() if k != TOKEN_HEADER}, HOST, TOKEN))
    assert "not this dashboard's token" in str(cross_site_refusal({**own, TOKEN_HEADER: "x"}, HOST, TOKEN))


def test_tokens_are_random_and_long() -> None:
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50 and all(len(t) >= 43 for t in tokens)


def test_only_the_four_buttons_and_kubernetes_names_are_targets() -> None:
    assert VERBS == ("promote", "pause", "resume", "abort")
    for verb in VERBS:
        assert bad_target("default", "web", verb) is None
    for namespace, name, verb in (("default", "web", "undo"), ("default", "web", "retry"), ("..", "web", "pause"),
                                  ("default", "..", "pause"), ("Default", "web", "pause"), ("default", "", "pause")):
        assert bad_target(namespace, name, verb) is not None, (namespace, name, verb)
