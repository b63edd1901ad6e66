"""What every client command shares without click or Typer: a failure is one `nanum: error: ...` line on
stderr with exit code 1 (failed) or 2 (bad usage or refused request), notes go to stderr, and the client comes
from --server/--token or the saved settings.

Kept free of click and Typer so that the quick path (`nanum.cli.fast`) runs `submit`, `ps`, `show` and `cancel`
without importing them; `nanum.cli.common` adds the Typer pieces.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from nanum.client import Client

F = TypeVar("F", bound=Callable[..., Any])


class UsageProblem(Exception):
    """A bad value on the command line or in a script header: exit code 2."""


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `nanum: error: MESSAGE` on stderr and exit."""
    sys.stderr.write(f"nanum: error: {message}\n")
    raise SystemExit(code)


def note(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays parseable)."""
    sys.stderr.write(f"{message}\n")


def connect(server: str | None, token: str | None) -> Client:
    """The client for the resolved settings; exits with a clear line when no server is configured."""
    from nanum.client import Client, resolve_settings

    url, tok = resolve_settings(server, token)
    if url is None:
        fail("no nanum server configured; start one with `nanum up`, or run "
             "`nanum login --server URL --token TOKEN`, or set NANUM_SERVER and NANUM_TOKEN", 2)
    return Client(url, tok)


def exit_code_for_status(status: int) -> int:
    """Refused requests (4xx) are exit 2; server trouble (5xx) is exit 1."""
    return 2 if 400 <= status < 500 else 1


def clean_errors(func: F) -> F:
    """Turn the client's exceptions and bad values into one line on stderr and the right exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from nanum.client import ApiError, NanumError

        try:
            return func(*args, **kwargs)
        except UsageProblem as exc:
            fail(str(exc), 2)
        except ApiError as exc:
            fail(exc.detail, exit_code_for_status(exc.status))
        except NanumError as exc:  # a bad argument (also a ValueError) is refused as the server would refuse it
            fail(str(exc), 2 if isinstance(exc, ValueError) else 1)
        except KeyboardInterrupt:
            sys.stderr.write("\n")
            raise SystemExit(130) from None
        except BrokenPipeError:
            sys.stderr.close()  # `nanum ps | head`: the reader left; nothing more to say
            raise SystemExit(0) from None

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2) + "\n")
