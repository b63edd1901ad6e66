"""`nanum up` (server, scheduler and a local agent in one command) and `nanum server` (the server alone)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nanum.cli.app import app

HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", metavar="DIR", help=(
        "State directory (default: $NANUM_HOME, else /var/lib/nanum for root, ~/.local/share/nanum for others).")),
]
HostOpt = Annotated[str, typer.Option("--host", metavar="H", help="Address to listen on.")]
PortOpt = Annotated[int, typer.Option("--port", metavar="P", help="Port to listen on.")]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", metavar="URL", help="Database URL (default: SQLite in DIR), e.g. postgresql+psycopg://..."),
]
RootOpt = Annotated[bool, typer.Option("--allow-root-jobs", help="Let jobs run as root (off by default).")]
PolicyOpt = Annotated[
    str | None,
    typer.Option("--policy", metavar="P", help="Queue policy ORDER[+PLACEMENT][+backfill|+nobackfill], e.g. "
                 "fairshare+binpack+backfill (default: the core's default policy)."),
]
HalfLifeOpt = Annotated[
    str | None, typer.Option("--half-life", metavar="D", help="Fair-share usage counts half after D (default: 7d).")
]
WebhookHostOpt = Annotated[
    list[str] | None,
    typer.Option("--webhook-allow-host", metavar="HOST", help="Let webhooks reach HOST although it is a loopback, "
                 "private or link-local address (refused by default); repeat for more hosts."),
]
MaxJobsOpt = Annotated[int | None, typer.Option(
    "--max-jobs-per-user", metavar="N", min=1, max=10_000_000, help="Most jobs one user may have waiting, held or "
    "running at once; a submission beyond it is refused, as Slurm's MaxSubmitJobs (default: 20,000).")]
MaxOutputOpt = Annotated[str | None, typer.Option(
    "--max-output", metavar="SIZE", help="The most of a job's output (stdout and stderr) kept, per node, e.g. 512M "
    "or 10G: a job that writes more is stopped (default: 1G).")]
MetricsNamesOpt = Annotated[
    bool, typer.Option("--metrics-names", help="Name users and labs in /metrics, served without a token (off by "
                       "default).")
]
GraceOpt = Annotated[
    float | None,
    typer.Option("--grace", metavar="S", min=0, help="Seconds from SIGTERM to SIGKILL for labs without their own "
                 "(default: 60)."),
]
LdapUrlOpt = Annotated[str | None, typer.Option(
    "--ldap-url", metavar="URL", help="Let people log in with their directory password, e.g. "
    "ldap://ldap.uni.example (ldaps:// for TLS); needs --ldap-base.", rich_help_panel="Directory login")]
LdapBaseOpt = Annotated[str | None, typer.Option(
    "--ldap-base", metavar="DN", help="Where people and groups are, e.g. dc=uni,dc=example.",
    rich_help_panel="Directory login")]
LdapBindOpt = Annotated[str | None, typer.Option(
    "--ldap-bind-dn", metavar="DN", help="Search as this DN (default: anonymously); needs "
    "--ldap-bind-password-file.", rich_help_panel="Directory login")]
LdapPasswordOpt = Annotated[Path | None, typer.Option(
    "--ldap-bind-password-file", metavar="FILE", help="The bind DN's password, in a file only you may read "
    "(chmod 600).", rich_help_panel="Directory login")]
LdapGroupOpt = Annotated[str | None, typer.Option(
    "--ldap-group-lab", metavar="REGEX", help="Groups whose DN matches REGEX make their members members of the "
    "lab its first group names, e.g. 'cn=(.*)-lab,ou=groups' (default: every group, by its cn).",
    rich_help_panel="Directory login")]
LdapRecheckOpt = Annotated[float, typer.Option(
    "--ldap-recheck", metavar="S", min=0, help="Check a directory user's standing again after S seconds: a "
    "disabled or removed account is refused from then on.", rich_help_panel="Directory login")]
LdapDaysOpt = Annotated[float, typer.Option(
    "--ldap-token-days", metavar="D", min=0.001, help="How long the token a password login hands out lasts.",
    rich_help_panel="Directory login")]
LdapCaOpt = Annotated[Path | None, typer.Option(
    "--ldap-ca-file", metavar="FILE", help="CA certificates (PEM) the ldaps:// directory's certificate must chain "
    "to; with it, the certificate and host name are verified.", rich_help_panel="Directory login")]
_SSO = "Single sign-on (OIDC)"
OidcIssuerOpt = Annotated[str | None, typer.Option(
    "--oidc-issuer", metavar="URL", help="Let people log in with an OpenID Connect provider, found at "
    "URL/.well-known/openid-configuration, e.g. https://sso.uni.example/realms/uni; needs --oidc-client-id.",
    rich_help_panel=_SSO)]
OidcClientOpt = Annotated[str | None, typer.Option(
    "--oidc-client-id", metavar="ID", help="This server's client at the provider.", rich_help_panel=_SSO)]
OidcSecretOpt = Annotated[Path | None, typer.Option(
    "--oidc-client-secret-file", metavar="FILE", help="The client's secret, in a file only you may read (chmod "
    "600); leave out for a public client.", rich_help_panel=_SSO)]
OidcUserClaimOpt = Annotated[str, typer.Option(
    "--oidc-username-claim", metavar="CLAIM", help="The ID token claim that is the user's name here.",
    rich_help_panel=_SSO)]
OidcUnixClaimOpt = Annotated[str | None, typer.Option(
    "--oidc-unix-claim", metavar="CLAIM", help="The claim naming the Unix account jobs run as (default: the user "
    "name).", rich_help_panel=_SSO)]
OidcGroupsClaimOpt = Annotated[str, typer.Option(
    "--oidc-groups-claim", metavar="CLAIM", help="The claim listing the user's groups.", rich_help_panel=_SSO)]
OidcGroupLabOpt = Annotated[str | None, typer.Option(
    "--oidc-group-lab", metavar="REGEX", help="Groups matching REGEX make their members members of the lab its "
    "first group names, e.g. '^/labs/(.*)$' (default: every group, a leading / dropped).", rich_help_panel=_SSO)]
OidcManagerOpt = Annotated[str | None, typer.Option(
    "--oidc-manager-group", metavar="REGEX", help="Groups matching REGEX make their members managers of the lab "
    "its first group names, e.g. '^/(.*)-managers$'; with it, the provider decides who manages which lab.",
    rich_help_panel=_SSO)]
OidcNameOpt = Annotated[str, typer.Option(
    "--oidc-name", metavar="NAME", help="What the login page's button says: 'Log in with NAME'.",
    rich_help_panel=_SSO)]
OidcDaysOpt = Annotated[float, typer.Option(
    "--oidc-token-days", metavar="D", min=0.001, help="How long the token `nanum login --oidc` gets lasts.",
    rich_help_panel=_SSO)]
CheckpointRootOpt = Annotated[
    Path | None,
    typer.Option("--checkpoint-root", metavar="DIR", help="Jobs' checkpoint directories, DIR/ID: shared storage "
                 "(NFS) that agents also use (`nanum agent --checkpoint-root`) (default: checkpoints/ in --home)."),
]
RetentionOpt = Annotated[
    str | None,
    typer.Option("--checkpoint-retention", metavar="D", help="Remove a job's checkpoint directory this long after "
                 "it ended: 12h, 7d (default: 7d)."),
]
LeaseOpt = Annotated[
    float | None,
    typer.Option("--lease", metavar="S", min=0.5, help="An agent that gets no reply from the server for S seconds "
                 "stops its jobs; a silent node's jobs are requeued after S + their grace + a margin (default: 30)."),
]


@app.command()
def up(
    home: HomeOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    simulate_gpus: Annotated[
        str | None,
        typer.Option("--simulate-gpus", metavar="SPEC", help="Simulate the local GPUs: N or NxMODEL, e.g. 8xA100."),
    ] = None,
    db: DbOpt = None,
    allow_root_jobs: RootOpt = False,
    policy: PolicyOpt = None,
    half_life: HalfLifeOpt = None,
    grace: GraceOpt = None,
    lease: LeaseOpt = None,
    checkpoint_root: CheckpointRootOpt = None,
    checkpoint_retention: RetentionOpt = None,
    webhook_allow_host: WebhookHostOpt = None,
    metrics_names: MetricsNamesOpt = False,
    max_jobs_per_user: MaxJobsOpt = None,
    max_output: MaxOutputOpt = None,
    ldap_url: LdapUrlOpt = None,
    ldap_base: LdapBaseOpt = None,
    ldap_bind_dn: LdapBindOpt = None,
    ldap_bind_password_file: LdapPasswordOpt = None,
    ldap_group_lab: LdapGroupOpt = None,
    ldap_recheck: LdapRecheckOpt = 300.0,
    ldap_token_days: LdapDaysOpt = 30.0,
    ldap_ca_file: LdapCaOpt = None,
    oidc_issuer: OidcIssuerOpt = None,
    oidc_client_id: OidcClientOpt = None,
    oidc_client_secret_file: OidcSecretOpt = None,
    oidc_username_claim: OidcUserClaimOpt = "preferred_username",
    oidc_unix_claim: OidcUnixClaimOpt = None,
    oidc_groups_claim: OidcGroupsClaimOpt = "groups",
    oidc_group_lab: OidcGroupLabOpt = None,
    oidc_manager_group: OidcManagerOpt = None,
    oidc_name: OidcNameOpt = "single sign-on",
    oidc_token_days: OidcDaysOpt = 30.0,
) -> None:
    """Start nanum on this machine: the server, the scheduler and an agent for this machine's GPUs."""
    tuning = _scheduling(policy, half_life, grace, lease) | _exposure(webhook_allow_host, metrics_names)
    tuning |= _limits(max_jobs_per_user, max_output)
    tuning |= _checkpoints(checkpoint_root, checkpoint_retention)
    tuning |= _directory(ldap_url, ldap_base, ldap_bind_dn, ldap_bind_password_file, ldap_group_lab, ldap_recheck,
                         ldap_token_days, ldap_ca_file)
    tuning |= _sso(oidc_issuer, oidc_client_id, oidc_client_secret_file, oidc_group_lab, oidc_manager_group,
                   claims=(oidc_username_claim, oidc_unix_claim, oidc_groups_claim), name=oidc_name,
                   token_days=oidc_token_days)
    _run(home, host, port, db, allow_root_jobs, with_agent=True, simulate=simulate_gpus, tuning=tuning)


@app.command()
def server(
    home: HomeOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    db: DbOpt = None,
    allow_root_jobs: RootOpt = False,
    policy: PolicyOpt = None,
    half_life: HalfLifeOpt = None,
    grace: GraceOpt = None,
    lease: LeaseOpt = None,
    checkpoint_root: CheckpointRootOpt = None,
    checkpoint_retention: RetentionOpt = None,
    webhook_allow_host: WebhookHostOpt = None,
    metrics_names: MetricsNamesOpt = False,
    max_jobs_per_user: MaxJobsOpt = None,
    max_output: MaxOutputOpt = None,
    ldap_url: LdapUrlOpt = None,
    ldap_base: LdapBaseOpt = None,
    ldap_bind_dn: LdapBindOpt = None,
    ldap_bind_password_file: LdapPasswordOpt = None,
    ldap_group_lab: LdapGroupOpt = None,
    ldap_recheck: LdapRecheckOpt = 300.0,
    ldap_token_days: LdapDaysOpt = 30.0,
    ldap_ca_file: LdapCaOpt = None,
    oidc_issuer: OidcIssuerOpt = None,
    oidc_client_id: OidcClientOpt = None,
    oidc_client_secret_file: OidcSecretOpt = None,
    oidc_username_claim: OidcUserClaimOpt = "preferred_username",
    oidc_unix_claim: OidcUnixClaimOpt = None,
    oidc_groups_claim: OidcGroupsClaimOpt = "groups",
    oidc_group_lab: OidcGroupLabOpt = None,
    oidc_manager_group: OidcManagerOpt = None,
    oidc_name: OidcNameOpt = "single sign-on",
    oidc_token_days: OidcDaysOpt = 30.0,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, max=64, metavar="N",
        help="Server processes sharing the port, serving the API and the agents (PostgreSQL only); with N > 1 one "
             "more process schedules, so the server can use N + 1 cores.")] = 1,
) -> None:
    """Start only the server and scheduler; GPU machines join with `nanum agent`."""
    tuning = _scheduling(policy, half_life, grace, lease) | _exposure(webhook_allow_host, metrics_names)
    tuning |= _limits(max_jobs_per_user, max_output)
    tuning |= _checkpoints(checkpoint_root, checkpoint_retention)
    tuning |= _directory(ldap_url, ldap_base, ldap_bind_dn, ldap_bind_password_file, ldap_group_lab, ldap_recheck,
                         ldap_token_days, ldap_ca_file)
    tuning |= _sso(oidc_issuer, oidc_client_id, oidc_client_secret_file, oidc_group_lab, oidc_manager_group,
                   claims=(oidc_username_claim, oidc_unix_claim, oidc_groups_claim), name=oidc_name,
                   token_days=oidc_token_days)
    _run(home, host, port, db, allow_root_jobs, with_agent=False, simulate=None, tuning=tuning, workers=workers)


def _scheduling(
    policy: str | None, half_life: str | None, grace: float | None, lease: float | None = None
) -> dict[str, Any]:
    """Server settings from the scheduling options, checked now so a typo fails before anything starts."""
    from nanum.cli.common import fail

    tuning: dict[str, Any] = {}
    if policy is not None:
        from nanum.core import Policy, PolicyError

        try:
            tuning["policy"] = Policy.parse(policy).label
        except PolicyError as exc:
            fail(f"--policy: {exc}", 2)
    if half_life is not None:
        from nanum.cli.common import UsageProblem
        from nanum.cli.jobspec import parse_time

        try:
            tuning["half_life_s"] = float(parse_time(half_life, "--half-life"))
        except UsageProblem as exc:
            fail(str(exc), 2)
    if grace is not None:
        tuning["grace_s"] = grace
    if lease is not None:
        tuning["lease_s"] = lease
    return tuning


def _limits(max_jobs_per_user: int | None, max_output: str | None) -> dict[str, Any]:
    """What one user or job may take of the cluster's shared parts: queue places, output kept."""
    from nanum.cli.common import UsageProblem, fail
    from nanum.cli.jobspec import parse_mem

    tuning: dict[str, Any] = {}
    if max_jobs_per_user is not None:
        tuning["max_jobs_per_user"] = max_jobs_per_user
    if max_output is not None:
        try:
            tuning["max_output_bytes"] = parse_mem(max_output, "--max-output") << 20
        except UsageProblem as exc:
            fail(str(exc), 2)
        if tuning["max_output_bytes"] > 1 << 50:
            fail(f"--max-output: {max_output} is more than a petabyte; give a size such as 512M or 10G", 2)
    return tuning


def _checkpoints(root: Path | None, retention: str | None) -> dict[str, Any]:
    """Where checkpoint directories are and how long they stay, checked now."""
    from nanum.cli.common import UsageProblem, fail
    from nanum.cli.jobspec import parse_time

    tuning: dict[str, Any] = {}
    if root is not None:
        tuning["checkpoint_root"] = root.expanduser().absolute()
    if retention is not None:
        try:
            tuning["checkpoint_retention_s"] = float(parse_time(retention, "--checkpoint-retention"))
        except UsageProblem as exc:
            fail(str(exc), 2)
    return tuning


def _exposure(webhook_hosts: list[str] | None, metrics_names: bool) -> dict[str, Any]:
    """Server settings that open what is closed by default: webhooks to internal hosts, names in /metrics."""
    hosts = frozenset(h.strip().lower().strip("[]").rstrip(".") for h in webhook_hosts or () if h.strip())
    return {"webhook_allow_hosts": hosts, "metrics_names": metrics_names}


def _directory(url: str | None, base: str | None, bind_dn: str | None, password_file: Path | None,
               group_lab: str | None, recheck: float, token_days: float, ca_file: Path | None = None) -> dict[str, Any]:
    """The directory login settings, checked now so that a mistake fails before anything starts."""
    import re

    from nanum.cli.common import fail
    from nanum.server.settings import DEFAULT_GROUP_LAB, LdapSettings

    if url is None:
        if base or bind_dn or password_file or group_lab or ca_file:
            fail("the --ldap-* options need --ldap-url (the directory's address, e.g. ldap://ldap.uni.example)", 2)
        return {}
    if not url.startswith(("ldap://", "ldaps://")) or not base:
        fail("--ldap-url takes ldap://HOST[:PORT] or ldaps://HOST[:PORT], and --ldap-base the DN people and groups "
             "are under, e.g. dc=uni,dc=example", 2)
    if (bind_dn is None) != (password_file is None):
        fail("--ldap-bind-dn and --ldap-bind-password-file go together; give both, or neither to search "
             "anonymously", 2)
    try:
        re.compile(group_lab or DEFAULT_GROUP_LAB)
    except re.error as exc:
        fail(f"--ldap-group-lab: {exc}; give a regular expression such as 'cn=(.*)-lab,ou=groups'", 2)
    password = _secret_file(password_file) if password_file is not None else None
    if ca_file is not None:
        if not url.startswith("ldaps://"):
            fail("--ldap-ca-file verifies an ldaps:// directory's certificate; give --ldap-url ldaps://HOST", 2)
        if not ca_file.is_file():
            fail(f"cannot read --ldap-ca-file {ca_file}: no such file; give the CA certificates in PEM", 2)
    return {"ldap": LdapSettings(url=url, base=base, bind_dn=bind_dn, bind_password=password,
                                 group_lab=group_lab or DEFAULT_GROUP_LAB, recheck_s=recheck,
                                 token_lifetime_s=token_days * 86400,
                                 ca_file=str(ca_file.resolve()) if ca_file else None)}


def _sso(issuer: str | None, client_id: str | None, secret_file: Path | None, group_lab: str | None,
         manager_group: str | None, *, claims: tuple[str, str | None, str], name: str,
         token_days: float) -> dict[str, Any]:
    """The single sign-on settings, checked now so that a mistake fails before anything starts."""
    import re

    from nanum.cli.common import fail
    from nanum.server.settings import DEFAULT_OIDC_GROUP_LAB, OidcSettings

    if issuer is None:
        if client_id or secret_file or group_lab or manager_group:
            fail("the --oidc-* options need --oidc-issuer (the provider's URL, e.g. "
                 "https://sso.uni.example/realms/uni)", 2)
        return {}
    if not issuer.startswith(("https://", "http://")) or not client_id:
        fail("--oidc-issuer takes the provider's https:// URL (where /.well-known/openid-configuration is), and "
             "--oidc-client-id this server's client there", 2)
    for flag, rule in (("--oidc-group-lab", group_lab), ("--oidc-manager-group", manager_group)):
        try:
            re.compile(rule or DEFAULT_OIDC_GROUP_LAB)
        except re.error as exc:
            fail(f"{flag}: {exc}; give a regular expression such as '^/(.*)-lab$'", 2)
    secret = _secret_file(secret_file, "--oidc-client-secret-file") if secret_file is not None else None
    username, unix, groups = claims
    return {"oidc": OidcSettings(issuer=issuer.rstrip("/"), client_id=client_id, client_secret=secret or None,
                                 username_claim=username, unix_claim=unix, groups_claim=groups,
                                 group_lab=group_lab or DEFAULT_OIDC_GROUP_LAB, manager_group=manager_group,
                                 token_lifetime_s=token_days * 86400, name=name)}


def _secret_file(path: Path, flag: str = "--ldap-bind-password-file") -> str:
    """A password file's first line; refused, as ssh refuses keys, when others may read or change it."""
    from nanum.cli.common import fail

    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as exc:
        fail(f"cannot read {flag} {path}: {exc.strerror}", 2)
    if mode & 0o077:
        fail(f"{path} may be read or changed by other users; run `chmod 600 {path}`", 2)
    return text.splitlines()[0] if text else ""


def _run(
    home: Path | None,
    host: str,
    port: int,
    db: str | None,
    allow_root: bool,
    *,
    with_agent: bool,
    simulate: str | None,
    tuning: dict[str, Any] | None = None,
    workers: int = 1,
) -> None:
    from nanum.cli.common import fail
    from nanum.config import default_home
    from nanum.server.runtime import LocalAgent, StartError, start
    from nanum.server.settings import ServerSettings

    if simulate is not None:
        from nanum.agent.gpus import SpecError, parse_spec

        try:
            parse_spec(simulate)
        except SpecError as exc:
            fail(f"--simulate-gpus: {exc}", 2)
    settings = ServerSettings(
        home=(home or default_home()).expanduser().resolve(), db_url=db, allow_root_jobs=allow_root, **(tuning or {})
    )
    try:
        start(settings, host, port, LocalAgent(simulate_gpus=simulate) if with_agent else None, workers)
    except StartError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass
