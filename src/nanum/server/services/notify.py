"""Telling people about their jobs: a webhook for the cluster and per user, and email where SMTP is configured.

Notices are sent from a thread of their own, so a slow webhook never holds up a heartbeat. A webhook gets
`{"text", "event", "job": {"id", "ref", "name", "user"}, "url"}` as JSON (the `text` field makes Slack and
Mattermost incoming webhooks show it as is). A failed delivery is logged and dropped; so is one to an address the
server refuses (`nanum.server.services.webhooks`, checked again at each delivery).
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import smtplib
import threading
from collections.abc import Collection, Mapping
from email.message import EmailMessage

from nanum.server.context import ServerContext
from nanum.server.services import monitor_settings, webhooks
from nanum.server.services.monitor_settings import NotifySettings
from nanum.server.services.samples import Notice

log = logging.getLogger("nanum.server")

TIMEOUT_S = 5.0
SUBJECTS = {"idle-flagged": "is idle", "idle-released": "was released for being idle"}


class Notifier:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self._queue: queue.Queue[Notice | threading.Event] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = 0

    def send(self, notices: list[Notice]) -> None:
        if not notices:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="nanum-notify", daemon=True)
                self._thread.start()
        for notice in notices:
            self._queue.put(notice)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every notice queued so far was handled (for tests and a clean stop)."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self) -> None:
        if self._thread is not None:
            self.flush(TIMEOUT_S)

    def _work(self) -> None:
        while True:
            notice = self._queue.get()
            if isinstance(notice, threading.Event):
                notice.set()
                continue
            try:
                self._deliver(notice)
            except Exception:
                log.exception("could not notify %s about job %s", notice.user, notice.job_ref)

    def _deliver(self, notice: Notice) -> None:
        with self.ctx.db.read() as s:
            settings = monitor_settings.notify_settings(s)
            email, webhook = monitor_settings.contact(s, notice.user_id)
        url = f"{settings.public_url.rstrip('/')}/jobs/{notice.job_id}" if settings.public_url else None
        payload = {
            "text": f"nanum: {notice.message}" + (f" {url}" if url else ""),
            "event": notice.kind,
            "job": {"id": notice.job_id, "ref": notice.job_ref, "name": notice.job_name, "user": notice.user},
            "url": url,
        }
        for target in dict.fromkeys(t for t in (settings.webhook_url, webhook) if t):
            _post(target, payload, self.ctx.settings.webhook_allow_hosts)
            self.sent += 1
        if email and settings.smtp_host:
            _mail(settings, email, notice, url)
            self.sent += 1


def _post(url: str, payload: Mapping[str, object], allowed: Collection[str]) -> None:
    try:
        status = webhooks.post(url, json.dumps(payload).encode(), allowed, TIMEOUT_S)
    except webhooks.Refused as exc:
        log.warning("webhook not sent: %s", exc)
    except (OSError, http.client.HTTPException) as exc:
        log.warning("webhook %s failed: %s", url, exc)
    else:
        if status >= 300:
            log.warning("webhook %s answered %d", url, status)


def _mail(settings: NotifySettings, to: str, notice: Notice, url: str | None) -> None:
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = to
    message["Subject"] = f"nanum: job {notice.job_ref} ({notice.job_name}) {SUBJECTS.get(notice.kind, notice.kind)}"
    message.set_content(notice.message + (f"\n\n{url}\n" if url else "\n"))
    try:
        with smtplib.SMTP(settings.smtp_host or "localhost", settings.smtp_port, timeout=TIMEOUT_S) as smtp:
            if settings.smtp_starttls:
                smtp.starttls()
            if settings.smtp_user:
                smtp.login(settings.smtp_user, settings.smtp_password or "")
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        log.warning("email to %s via %s failed: %s", to, settings.smtp_host, exc)
