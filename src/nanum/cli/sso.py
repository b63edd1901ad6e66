"""`nanum login --oidc`: single sign-on from a terminal, by the device authorization grant (RFC 8628).

The server names its provider and client (`GET /api/v1/auth`). The command asks the provider for a device code,
shows the address to open and the code to enter (on any device with a browser), polls the provider's token
endpoint at the interval it asks for until the person has approved, and trades the ID token it gets for a nanum
API token (`POST /api/v1/login/oidc`), which the server hands out only after checking the ID token itself.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx

from nanum.cli.common import UsageProblem
from nanum.client import Client

SCOPE = "openid profile email"


class SsoFailed(UsageProblem):
    """The single sign-on did not end in a login (refused, expired, or the provider cannot do it)."""


def device_login(client: Client) -> tuple[str, str | None]:
    """(API token, when it expires) after the person approves this login at the provider."""
    from authlib.oauth2.rfc8628 import DEVICE_CODE_GRANT_TYPE

    sso = client.auth_methods().get("oidc")
    if not sso:
        raise SsoFailed(f"{client.server} has no single sign-on; log in with `nanum login {client.server}`")
    meta = _json("GET", f"{str(sso['issuer']).rstrip('/')}/.well-known/openid-configuration")
    if not meta.get("device_authorization_endpoint"):
        raise SsoFailed(f"{sso['issuer']} does not offer device logins (RFC 8628), which `nanum login --oidc` "
                        "needs; ask its administrator to allow the device grant for client " + str(sso["client_id"]))
    device = _json("POST", meta["device_authorization_endpoint"], {"client_id": sso["client_id"], "scope": SCOPE})
    where = device.get("verification_uri_complete") or device.get("verification_uri") or device.get(
        "verification_url")
    print(f"To log in with {sso['name']}, open {where}\nand enter the code {device['user_code']}", flush=True)
    print("Waiting for you to approve ...", flush=True)
    form = {"grant_type": DEVICE_CODE_GRANT_TYPE, "device_code": device["device_code"],
            "client_id": sso["client_id"]}
    id_token = _poll(meta["token_endpoint"], form, float(device.get("interval") or 5),
                     time.monotonic() + float(device.get("expires_in") or 600))
    done = client.oidc_login(id_token, f"login on {socket.gethostname()}"[:64])
    return done["token"], done.get("expires")


def _poll(url: str, form: dict[str, str], interval: float, deadline: float) -> str:
    while time.monotonic() < deadline:
        time.sleep(interval)
        answer = _json("POST", url, form, ok_errors=True)
        error = answer.get("error")
        if error is None:
            if not answer.get("id_token"):
                raise SsoFailed("the provider answered without an ID token; its client needs the openid scope")
            return str(answer["id_token"])
        if error == "slow_down":
            interval += 5
        elif error == "access_denied":
            raise SsoFailed("the login was denied at the provider")
        elif error == "expired_token":
            break
        elif error != "authorization_pending":
            raise SsoFailed(f"the provider refused the login: {answer.get('error_description') or error}")
    raise SsoFailed("the code expired before it was approved; run `nanum login --oidc` again")


def _json(method: str, url: str, form: dict[str, str] | None = None, ok_errors: bool = False) -> dict[str, Any]:
    try:
        r = httpx.request(method, url, data=form, timeout=30, headers={"Accept": "application/json"})
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise SsoFailed(f"cannot reach the single sign-on provider at {url}: {exc}") from None
    if not isinstance(body, dict) or (r.status_code >= 400 and not (ok_errors and "error" in body)):
        raise SsoFailed(f"the single sign-on provider answered {r.status_code} at {url}: {r.text[:200]}")
    return body
