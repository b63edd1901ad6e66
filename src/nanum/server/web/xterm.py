"""xterm.js for the web terminal: where the dashboard serves it from, and fetching it from the npm registry.

The terminal page (`nanum.server.web.terminal`) runs xterm.js and its fit add-on, which nanum does not ship in
its source: `make` (or `python -m nanum.server.web.xterm`) downloads the pinned releases below from the npm
registry, checks each tarball against its published sha512, and unpacks the three files the page needs into
`static/xterm/`, which the dashboard serves at `/static/xterm/`. Where they are missing (no registry reachable),
the terminal page says how to get them and points to `nanum shell`; nothing else depends on them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

__all__ = ["DIR", "available", "fetch"]

DIR = Path(__file__).parent / "static" / "xterm"
#: (tarball, its npm `dist.integrity`, {member in the tarball: file name under DIR})
RELEASES = (
    ("https://registry.npmjs.org/@xterm/xterm/-/xterm-5.5.0.tgz",
     "sha512-hqJHYaQb5OptNunnyAnkHyM8aCjZ1MEIDTQu1iIbbTD/xops91NB5yq1ZK/dC2JDbVWtF23zUtl9JE2NqwT87A==",
     {"package/lib/xterm.js": "xterm.js", "package/css/xterm.css": "xterm.css"}),
    ("https://registry.npmjs.org/@xterm/addon-fit/-/addon-fit-0.10.0.tgz",
     "sha512-UFYkDm4HUahf2lnEyHvio51TNGiLK66mqP2JoATy7hRZeXaGMRDr00JiSF7m63vR5WKATF605yEggJKsw0JpMQ==",
     {"package/lib/addon-fit.js": "addon-fit.js"}),
)
FILES = tuple(name for _, _, members in RELEASES for name in members.values())


def available(directory: Path = DIR) -> bool:
    """Whether every file the terminal page loads is there."""
    return all((directory / name).is_file() for name in FILES)


def fetch(directory: Path = DIR, timeout_s: float = 60.0) -> None:
    """Download and unpack the pinned releases into `directory`; ValueError if a tarball is not the one
    published, OSError if the registry cannot be reached."""
    directory.mkdir(parents=True, exist_ok=True)
    for url, integrity, members in RELEASES:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            data = answer.read()
        algorithm, _, expected = integrity.partition("-")
        if base64.b64encode(hashlib.new(algorithm, data).digest()).decode() != expected:
            raise ValueError(f"{url} is not the published release (its {algorithm} differs)")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member, name in members.items():
                source = tar.extractfile(member)
                if source is None:
                    raise ValueError(f"{url} has no {member}")
                (directory / name).write_bytes(source.read())


def main() -> int:
    if available():
        return 0
    try:
        fetch()
    except (OSError, ValueError) as exc:
        print(f"nanum: xterm.js for the web terminal could not be fetched ({exc}); the dashboard works without "
              "it, and `nanum shell` opens shells", file=sys.stderr)
        return 1
    print(f"nanum: fetched xterm.js for the web terminal into {DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
