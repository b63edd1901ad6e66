"""A real OpenID Connect provider for the tests, built from Authlib's authorization server (Flask integration):
discovery, JWKS, the authorization code flow with PKCE and OpenID's ID token, the device authorization grant
(RFC 8628) with ID tokens, and plain HTML forms where a person types their name and password (Chromium fills
them in the browser tests). Served by werkzeug on a free loopback port in a thread.

    with Provider(client_id="nanum") as p:
        p.add_user("kim", "kim-pw", groups=["/vision", "/nlp"])
        p.issuer, p.approve_device(user_code, "kim", "kim-pw"), p.sign({...})
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant, DeviceCredentialDict
from authlib.oidc.core import OpenIDCode, OpenIDToken, UserInfo
from flask import Flask, request
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from markupsafe import escape
from werkzeug.serving import make_server

from tests.ports import free_port


@dataclass
class Person:
    username: str
    password: str
    sub: str
    groups: list[str]
    email: str | None


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str | None
    redirect_uris: list[str] = field(default_factory=list)

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in ("openid", "profile", "email"))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return not self.redirect_uris or redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return self.client_secret is not None and secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == ("client_secret_basic" if self.client_secret else "none") or (
            self.client_secret is not None and method == "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", DeviceCodeGrant.GRANT_TYPE)


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: Person
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class Provider:
    """One provider with one client; people are added with `add_user`. `host` is the name the issuer URL uses
    (e.g. `localhost`, so that a nanum at 127.0.0.1 is another site to the browser)."""

    def __init__(self, *, client_id: str = "nanum", client_secret: str | None = None, host: str = "127.0.0.1",
                 id_token_lifetime_s: int = 300) -> None:
        self.port = free_port()
        self.issuer = f"http://{host}:{self.port}"
        self.client = Client(client_id, client_secret)
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key-1", "use": "sig", "alg": "RS256"})
        self.people: dict[str, Person] = {}
        self.codes: dict[str, Code] = {}
        self.devices: dict[str, DeviceCredentialDict] = {}
        self.grants: dict[str, tuple[Person, bool]] = {}
        self.lifetime = id_token_lifetime_s
        self.app = self._app()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True)

    def __enter__(self) -> Provider:
        self._thread.start()
        httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=10).raise_for_status()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)

    def add_user(self, username: str, password: str, *, groups: tuple[str, ...] = (), email: str | None = None,
                 sub: str | None = None) -> Person:
        person = Person(username, password, sub or f"sub-{secrets.token_hex(8)}", list(groups), email)
        self.people[username] = person
        return person

    # -- what the tests use directly ------------------------------------------------------------------------------

    def claims(self, person: Person, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.issuer, "sub": person.sub, "aud": self.client.client_id, "iat": now,
                "exp": now + self.lifetime, "preferred_username": person.username, "groups": person.groups,
                "email": person.email, **extra}

    def sign(self, claims: dict[str, Any], key: RSAKey | None = None) -> str:
        """An ID token with these claims, signed with the provider's key (or another, to forge one)."""
        key = key or self.key
        return jwt.encode({"alg": "RS256", "kid": str(key.kid)}, claims, key)

    def approve_device(self, user_code: str, username: str, password: str, allow: bool = True) -> httpx.Response:
        """Approve (or deny) a device login as the person would: the verification page's form, over HTTP."""
        return httpx.post(f"{self.issuer}/device", data={"user_code": user_code, "username": username,
                                                         "password": password, "allow": "yes" if allow else "no"})

    # -- the provider ---------------------------------------------------------------------------------------------

    def _person(self, username: str, password: str) -> Person | None:
        person = self.people.get(username)
        return person if person and secrets.compare_digest(person.password, password) else None

    def _app(self) -> Flask:
        app = Flask("oidc-provider")
        app.config["OAUTH2_ACCESS_TOKEN_GENERATOR"] = True
        server = AuthorizationServer(app, query_client=lambda cid: self.client if cid == self.client.client_id
                                     else None, save_token=lambda token, req: None)
        server.register_grant(_codes(self), [_openid_code(self), CodeChallenge(required=True)])
        server.register_grant(_device_grant(self), [_openid_token(self)])
        server.register_endpoint(_device_endpoint(self))
        _routes(self, app, server)
        return app


def _user_info(provider: Provider, user: Person, scope: str) -> UserInfo:
    claims = provider.claims(user)
    return UserInfo({k: claims[k] for k in ("sub", "preferred_username", "groups", "email") if claims[k]})


def _openid_mixin(provider: Provider) -> dict[str, Any]:
    return {
        "resolve_client_private_key": lambda self, client: provider.key,
        "get_client_claims": lambda self, client: {"iss": provider.issuer, "aud": [client.get_client_id()],
                                                   "exp": int(time.time()) + provider.lifetime},
        "get_client_algorithm": lambda self, client: "RS256",
        "get_encode_header": lambda self, client: {"alg": "RS256", "kid": provider.key.kid},
        "generate_user_info": lambda self, user, scope: _user_info(provider, user, scope),
    }


def _openid_code(provider: Provider) -> OpenIDCode:
    cls = type("Code", (OpenIDCode,), {**_openid_mixin(provider), "exists_nonce": lambda self, n, r: False})
    return cls(require_nonce=True)


def _openid_token(provider: Provider) -> OpenIDToken:
    return type("DeviceToken", (OpenIDToken,), _openid_mixin(provider))()


def _codes(provider: Provider) -> type:
    def save(self: Any, code: str, req: Any) -> None:
        data = req.payload.data
        provider.codes[code] = Code(code, req.client.client_id, req.payload.redirect_uri, req.payload.scope,
                                    req.user, data.get("nonce"), data.get("code_challenge"),
                                    data.get("code_challenge_method"), int(time.time()))

    return type("Codes", (grants.AuthorizationCodeGrant,), {
        "TOKEN_ENDPOINT_AUTH_METHODS": ["client_secret_basic", "client_secret_post", "none"],
        "save_authorization_code": save,
        "query_authorization_code": lambda self, code, client: provider.codes.get(code),
        "delete_authorization_code": lambda self, code: provider.codes.pop(code.code, None),
        "authenticate_user": lambda self, code: code.user,
    })


def _device_grant(provider: Provider) -> type:
    return type("Devices", (DeviceCodeGrant,), {
        "query_device_credential": lambda self, device_code: provider.devices.get(device_code),
        "query_user_grant": lambda self, user_code: provider.grants.get(user_code),
        "should_slow_down": lambda self, credential: False,
    })


def _device_endpoint(provider: Provider) -> type:
    def save(self: Any, client_id: str, scope: str, data: dict[str, Any]) -> None:
        credential = DeviceCredentialDict(client_id=client_id, scope=scope, **data)
        credential["expires_at"] = int(time.time()) + self.EXPIRES_IN
        provider.devices[data["device_code"]] = credential

    return type("DeviceAuthorization", (DeviceAuthorizationEndpoint,), {
        "CLIENT_AUTH_METHODS": ["client_secret_basic", "client_secret_post", "none"],
        "INTERVAL": 1,
        "get_verification_uri": lambda self: f"{provider.issuer}/device",
        "save_device_credential": save,
    })


LOGIN_FORM = """<!doctype html><title>Test provider</title><h1>Sign in to the test provider</h1>
<p class="error">{error}</p><form method="post">{hidden}
<label>Username <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button type="submit" id="sign-in">Sign in</button></form>"""


def _routes(provider: Provider, app: Flask, server: AuthorizationServer) -> None:
    @app.get("/.well-known/openid-configuration")
    def discovery() -> dict[str, Any]:
        i = provider.issuer
        return {"issuer": i, "authorization_endpoint": f"{i}/authorize", "token_endpoint": f"{i}/token",
                "jwks_uri": f"{i}/jwks", "device_authorization_endpoint": f"{i}/device_authorization",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"], "code_challenge_methods_supported": ["S256"],
                "grant_types_supported": ["authorization_code", DeviceCodeGrant.GRANT_TYPE],
                "scopes_supported": ["openid", "profile", "email"]}

    @app.get("/jwks")
    def jwks() -> dict[str, Any]:
        return KeySet([provider.key]).as_dict(private=False)

    @app.route("/authorize", methods=["GET", "POST"])
    def authorize() -> Any:
        if request.method == "GET":
            server.get_consent_grant(end_user=None)  # checks the client, redirect URI, PKCE; raises if wrong
            return _form("", {})  # posted back to this URL: the request's parameters stay in the query
        person = provider._person(request.form.get("username", ""), request.form.get("password", ""))
        if person is None:
            return _form("Wrong username or password.", {}), 401
        return server.create_authorization_response(grant_user=person, grant=server.get_consent_grant(end_user=person))

    @app.post("/token")
    def token() -> Any:
        return server.create_token_response()

    @app.post("/device_authorization")
    def device_authorization() -> Any:
        return server.create_endpoint_response(DeviceAuthorizationEndpoint.ENDPOINT_NAME)

    @app.route("/device", methods=["GET", "POST"])
    def device() -> Any:
        if request.method == "GET":
            return _form("", {}, user_code=request.args.get("user_code", ""))
        person = provider._person(request.form.get("username", ""), request.form.get("password", ""))
        code = request.form.get("user_code", "").strip().upper()
        if person is None or not any(d["user_code"] == code for d in provider.devices.values()):
            return _form("Wrong username, password or code.", {}, user_code=code), 401
        provider.grants[code] = (person, request.form.get("allow", "yes") == "yes")
        return "<p>Done: you may close this window and go back to your terminal.</p>"


def _form(error: str, hidden: dict[str, str], user_code: str | None = None) -> str:
    fields = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in hidden.items()
                     if k not in ("username", "password"))
    if user_code is not None:
        fields += f'<label>Code <input id="user_code" name="user_code" value="{escape(user_code)}"></label>'
    return LOGIN_FORM.format(error=escape(error), hidden=fields)
