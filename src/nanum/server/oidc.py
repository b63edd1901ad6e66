"""Single sign-on with one OpenID Connect provider (Keycloak, Google Workspace, Azure AD): the provider says who
a person is, which Unix account their jobs run as, and which labs they belong to.

The provider is found by discovery (`ISSUER/.well-known/openid-configuration`; the document must name the same
issuer). The dashboard uses the authorization code flow with PKCE (S256), a `state` and a `nonce` (Authlib builds
the request; the code is traded by a plain form POST, as Authlib's httpx integration is being replaced and warns
on import); `nanum login --oidc` gets an ID token by the device authorization grant and hands it to the server.
Either way the server checks the ID token itself: signed by one of the keys the provider publishes (`jwks_uri`,
fetched again when a token names a key not seen yet), issued by the configured issuer (`iss`), for this server's
client (`aud`), not expired (`exp`, one minute of clock skew), and, in the code flow, carrying the login's `nonce`.

Claims become a person: the user name is `username_claim` (default `preferred_username`), the Unix account
`unix_claim` (default: the user name), and each group listed in `groups_claim` (default `groups`) whose name
matches `group_lab` (a regular expression; its first group is the lab's name) makes them a member of that lab;
one matching `manager_group` makes them its manager instead. JOSE is Authlib's joserfc; nothing of it is hand-written.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import httpx
from joserfc import jwt
from joserfc.errors import BadSignatureError, ClaimError, ExpiredTokenError, JoseError
from joserfc.jwk import KeySet

from nanum.server.settings import OidcSettings

_LAB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Signature algorithms taken in an ID token (never `none`, never a MAC keyed by a public value).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
SCOPE = "openid profile email"
#: Discovery and keys are fetched again after this long (seconds).
REFRESH_S = 3600.0
#: Keys are fetched again for a token that names an unknown key at most this often (seconds).
REFETCH_S = 60.0
LEEWAY_S = 60


@dataclass(frozen=True, slots=True)
class OidcPerson:
    issuer: str
    subject: str
    name: str
    unix_user: str
    email: str | None
    labs: tuple[str, ...]
    managed: tuple[str, ...]


class ProviderUnavailable(Exception):
    """The provider could not be asked (down, a bad discovery document): nobody can log in with it just now."""


class TokenRefused(Exception):
    """The ID token or the login is not good: the message says why, in one sentence."""


class Provider:
    """The provider of one server's settings (`provider_for`); discovery and keys are fetched when first needed."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self.issuer = settings.issuer.rstrip("/")
        self.group_lab = re.compile(settings.group_lab)
        self.manager_group = re.compile(settings.manager_group) if settings.manager_group else None
        self._lock = threading.Lock()
        self._metadata: tuple[float, dict[str, Any]] | None = None
        self._keys: tuple[float, KeySet] | None = None

    # -- what the provider publishes ---------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The discovery document (cached for REFRESH_S)."""
        with self._lock:
            if self._metadata is not None and time.monotonic() - self._metadata[0] < REFRESH_S:
                return self._metadata[1]
        url = f"{self.issuer}/.well-known/openid-configuration"
        found = self._get_json(url)
        if str(found.get("issuer", "")).rstrip("/") != self.issuer:
            raise ProviderUnavailable(f"{url} names the issuer {found.get('issuer')!r}, not {self.issuer!r}; "
                                      "give --oidc-issuer exactly as the provider names itself")
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not found.get(k)]
        if missing:
            raise ProviderUnavailable(f"{url} has no {', '.join(missing)}")
        with self._lock:
            self._metadata = (time.monotonic(), found)
        return found

    def keys(self, refresh: bool = False) -> KeySet:
        """The provider's signing keys (cached; `refresh` fetches them again, at most every REFETCH_S, so that
        a flood of forged tokens does not become a flood of requests to the provider)."""
        with self._lock:
            if self._keys is not None:
                age = time.monotonic() - self._keys[0]
                if age < (REFETCH_S if refresh else REFRESH_S):
                    return self._keys[1]
        try:
            keys = KeySet.import_key_set(self._get_json(self.metadata()["jwks_uri"]))  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError) as exc:
            raise ProviderUnavailable(f"the provider's keys at {self.metadata()['jwks_uri']} are unreadable: "
                                      f"{exc}") from exc
        with self._lock:
            self._keys = (time.monotonic(), keys)
        return keys

    def _get_json(self, url: str) -> dict[str, Any]:
        try:
            r = httpx.get(url, timeout=self.settings.timeout_s, follow_redirects=True)
            r.raise_for_status()
            found = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderUnavailable(f"cannot read {url}: {exc}") from exc
        if not isinstance(found, dict):
            raise ProviderUnavailable(f"{url} is not a JSON object")
        return found

    # -- the authorization code flow ---------------------------------------------------------------------------

    def authorization_url(self, redirect_uri: str, state: str, nonce: str, code_verifier: str) -> str:
        """Where to send the browser: the provider's login, coming back to `redirect_uri` with a code."""
        from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
        from authlib.oauth2.rfc7636 import create_s256_code_challenge

        return str(prepare_grant_uri(self.metadata()["authorization_endpoint"], self.settings.client_id, "code",
                                     redirect_uri=redirect_uri, scope=SCOPE, state=state, nonce=nonce,
                                     code_challenge=create_s256_code_challenge(code_verifier),
                                     code_challenge_method="S256"))

    def exchange_code(self, code: str, redirect_uri: str, code_verifier: str) -> str:
        """The ID token for an authorization code (the provider checks the PKCE verifier)."""
        s = self.settings
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": code_verifier}
        auth = None if s.client_secret is None else httpx.BasicAuth(s.client_id, s.client_secret)
        if auth is None:
            form["client_id"] = s.client_id
        url = self.metadata()["token_endpoint"]
        try:
            r = httpx.post(url, data=form, auth=auth, timeout=s.timeout_s, headers={"Accept": "application/json"})
            token = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderUnavailable(f"cannot reach the provider's token endpoint {url}: {exc}") from exc
        if not isinstance(token, dict) or r.status_code != 200:
            error = token.get("error_description") or token.get("error") if isinstance(token, dict) else r.text[:200]
            raise TokenRefused(f"the provider refused the login ({error}); start again")
        if not token.get("id_token"):
            raise TokenRefused("the provider answered without an ID token; the client needs the openid scope")
        return str(token["id_token"])

    # -- checking an ID token ----------------------------------------------------------------------------------

    def verify(self, id_token: str, nonce: str | None = None) -> dict[str, Any]:
        """The claims of a valid ID token from this provider for this client; else TokenRefused (one sentence)."""
        try:
            token = self._decode(id_token)
        except BadSignatureError:
            raise TokenRefused(f"the ID token's signature does not match the keys of {self.issuer}; it was not "
                               "issued by the configured provider") from None
        except JoseError as exc:
            if exc.error == "invalid_key_id":
                raise TokenRefused(f"the ID token is signed with a key {self.issuer} does not publish; it was not "
                                   "issued by the configured provider") from None
            raise TokenRefused(f"that is not an ID token this server can read ({exc.error}); log in again") from None
        claims = dict(token.claims)
        self._check_claims(claims, nonce)
        return claims

    def _decode(self, id_token: str) -> Any:
        try:
            return jwt.decode(id_token.strip(), self.keys(), algorithms=list(ALGORITHMS))
        except (BadSignatureError, ValueError):
            pass  # perhaps signed by a key the provider rotated in since: fetch the keys again, once
        except JoseError as exc:
            if exc.error != "invalid_key_id" and "key" not in str(exc.description or "").lower():
                raise
        return jwt.decode(id_token.strip(), self.keys(refresh=True), algorithms=list(ALGORITHMS))

    def _check_claims(self, claims: dict[str, Any], nonce: str | None) -> None:
        if str(claims.get("iss", "")).rstrip("/") != self.issuer:
            raise TokenRefused(f"the ID token was issued by {claims.get('iss')!r}, not by {self.issuer}")
        aud = claims.get("aud")
        audiences = aud if isinstance(aud, list) else [aud]
        if self.settings.client_id not in audiences:
            raise TokenRefused(f"the ID token is for another client ({', '.join(map(str, audiences))}), not this "
                               f"server's client {self.settings.client_id}")
        registry = jwt.JWTClaimsRegistry(leeway=LEEWAY_S, exp={"essential": True}, sub={"essential": True})
        try:
            registry.validate(claims)
        except ExpiredTokenError:
            raise TokenRefused(f"the ID token expired at {_when(claims.get('exp'))}; log in again") from None
        except ClaimError as exc:
            raise TokenRefused(f"the ID token's {exc.claim} claim is missing or wrong; log in again") from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise TokenRefused("the ID token does not belong to this login (its nonce differs); start again")

    # -- who the claims say the person is ----------------------------------------------------------------------

    def person(self, claims: dict[str, Any]) -> OidcPerson:
        """The person an ID token's claims describe; TokenRefused when a needed claim is missing or unusable."""
        s = self.settings
        name = _claim(claims, s.username_claim)
        unix = _claim(claims, s.unix_claim) if s.unix_claim else name
        for what, value, claim in (("user name", name, s.username_claim), ("Unix account", unix, s.unix_claim)):
            if not value or not _USER_NAME.match(value):
                raise TokenRefused(f"the ID token's {claim} claim gives no usable {what} ({value!r}); ask the "
                                   "provider's administrator, or set --oidc-username-claim / --oidc-unix-claim")
        groups = claims.get(s.groups_claim) or []
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups if isinstance(g, str | int)]
        email = claims.get("email")
        managers = [g for g in groups if self.manager_group and self.manager_group.search(g)]
        return OidcPerson(issuer=self.issuer, subject=str(claims["sub"]), name=name, unix_user=unix,
                          email=str(email) if email else None,
                          labs=self._labs([g for g in groups if g not in managers], self.group_lab),
                          managed=self._labs(managers, self.manager_group) if self.manager_group else ())

    @staticmethod
    def _labs(groups: list[str], rule: re.Pattern[str]) -> tuple[str, ...]:
        labs = []
        for group in groups:
            if (m := rule.search(group)) and _LAB_NAME.match(lab := m.group(1) if m.groups() else ""):
                labs.append(lab)
        return tuple(sorted(set(labs)))


def _claim(claims: dict[str, Any], name: str | None) -> str:
    value = claims.get(name or "")
    return value.strip() if isinstance(value, str) else ""


def _when(t: object) -> str:
    try:
        return datetime.fromtimestamp(float(t), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(t)


@lru_cache(maxsize=8)
def provider_for(settings: OidcSettings) -> Provider:
    return Provider(settings)
