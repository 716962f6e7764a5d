"""`edgeagent dashboard --allow-actions`: the rollout buttons' one route, and its guard against other web sites.

A button makes exactly the write of the CLI verb it is named after: the route calls
`edgeagent.rollout.steer.steer`, the function `edgeagent rollout promote|pause|resume|abort` calls, with the
dashboard's own KubeClient, so with the credentials of the kubeconfig the page reads with. The API server
decides what those credentials may do (RBAC); a refusal, the API server's or the steering rules', goes back
to the page as one line of plain text, shown as text.

Any web page the user opens can make the browser POST to 127.0.0.1, with the user's reach to loopback. A
request is acted on only when it proves it comes from the dashboard's own page:
- `X-Edgeagent-Token`: a random token made once per process and written only into the page (a meta tag).
  Another site cannot read the page (same-origin policy), and cannot add a custom header to a cross-origin
  request without a CORS preflight, which this server never grants;
- `Origin` is the dashboard's own: `http://` and the Host the page was reached at (browsers send Origin on
  every POST; the server's guard has already refused a Host that is not loopback, so a DNS-rebound name
  never counts as "own"); another port of 127.0.0.1 is another origin;
- `Sec-Fetch-Site`, when the browser sends it, is `same-origin` (another loopback port is `same-site`).
Each refusal is a 403 whose one line says which check failed. The rules are pure functions of the request's
headers, tested without a browser; the browser test shows a real cross-site POST refused.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping

from edgeagent.kube.client import KubeClient
from edgeagent.kube.errors import Forbidden, KubeError, KubeUnreachable
from edgeagent.kube.objects import is_dns1123_label, is_dns1123_subdomain
from edgeagent.rollout import api, steer

TOKEN_HEADER = "X-Edgeagent-Token"
# The buttons: the CLI verbs that steer a rollout in progress (retry and undo stay on the command line).
VERBS = ("promote", "pause", "resume", "abort")
ROUTE = "/api/actions/{namespace}/{name}/{verb}"


def new_token() -> str:
    """The page's token: 256 random bits, made once per process (a restart makes open pages' buttons stale)."""
    return secrets.token_urlsafe(32)


def cross_site_refusal(headers: Mapping[str, str], host: str, token: str) -> str | None:
    """Why this POST is not known to come from the dashboard's own page (None: it is)."""
    own = f"http://{host}".lower()
    origin = headers.get("Origin")
    if origin is None:
        return ("refused: the request has no Origin header (a browser sends one with every POST); only the "
                "dashboard's own page may steer a rollout")
    if origin.lower() != own:
        return (f"refused: the request comes from {origin}, not from the dashboard's own page ({own}); another "
                "web site may not steer a rollout")
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.lower() != "same-origin":
        return (f"refused: the browser says the request is {site} (Sec-Fetch-Site), not same-origin; only the "
                "dashboard's own page may steer a rollout")
    sent = headers.get(TOKEN_HEADER)
    if not sent:
        return (f"refused: the request has no {TOKEN_HEADER} header (the token the dashboard's page carries); "
                "reload the page")
    if not hmac.compare_digest(sent.encode(), token.encode()):
        return (f"refused: the {TOKEN_HEADER} header is not this dashboard's token (a page from an earlier run "
                "of the dashboard?); reload the page")
    return None


def bad_target(namespace: str, name: str, verb: str) -> str | None:
    """Why the route's words name no action (None: they do)."""
    if verb not in VERBS:
        return f"no such action {verb!r}: the buttons are {', '.join(VERBS)}"
    if not is_dns1123_label(namespace) or not is_dns1123_subdomain(name):
        return f"{namespace}/{name} is not a DaemonSet's namespace/name"
    return None


def forbidden_text(verb: str, namespace: str, name: str, exc: Forbidden) -> str:
    """A 403 is a permission the user lacks, not a rejected credential: name the one the button needs."""
    return (f"not allowed: the API server accepted your credentials but refused the {verb} of {namespace}/{name} "
            f"(403): {exc.message}; the button writes as `edgeagent rollout {verb}` does, which needs list and "
            f'patch on {api.PLURAL}.{api.GROUP} in namespace "{namespace}"')


async def act(client: KubeClient, namespace: str, name: str, verb: str) -> tuple[int, str]:
    """Steer as the CLI verb does: (the HTTP status for the page, the line to show). 200 with the CLI's own
    line; 409 when the steering rules refuse (nothing to promote, a request still pending); the API server's
    4xx as it answered (403: the permission named); 502 when it failed or could not be reached."""
    try:
        return 200, await steer.steer(client, namespace, name, verb)
    except steer.SteerError as exc:
        return 409, str(exc)
    except Forbidden as exc:
        return 403, forbidden_text(verb, namespace, name, exc)
    except KubeError as exc:
        return (exc.code if 400 <= exc.code <= 499 else 502), f"the API server refused the {verb}: {exc}"
    except KubeUnreachable as exc:
        where = f" at {exc.server}" if exc.server else ""
        return 502, f"cannot reach the API server{where}: {exc}"
