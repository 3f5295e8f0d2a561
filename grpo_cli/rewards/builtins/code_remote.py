"""External sandbox backends for the `code` reward: Piston and SandboxFusion, over their HTTP APIs (E2B and
Morph Cloud, which need a sandbox made first, are in code_cloud.py).

For users who outgrow one machine: the reward sends each test (program + test code, or program +
stdin) as one execution request. UNTESTED against real servers here (neither can be started on
the development machine: both ship as container images); the request and response shapes follow
their documentation:

* Piston (engineer-man/piston): `POST {url}/api/v2/execute` with `language`, `version`,
  `files: [{name, content}]`, `stdin`, `run_timeout` (ms), `run_memory_limit` (bytes); the answer's
  `run` holds `stdout`, `stderr`, `code`, `signal`.
* SandboxFusion (bytedance): `POST {url}/run_code` with `code`, `language`, `stdin`, `run_timeout`
  (s), `memory_limit_MB`; the answer has `status` ("Success") and `run_result` with `status`
  ("Finished"), `return_code`, `stdout`, `stderr`.

A server that cannot be reached stops the reward with a clear error instead of scoring every
completion 0 (a silent all-zero reward would train nothing).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.rewards.builtins.code_cloud import run_cloud

BACKENDS = ("local", "piston", "sandbox-fusion", "e2b", "morph")
DEFAULT_URLS = {"piston": "http://localhost:2000", "sandbox-fusion": "http://localhost:8080"}


@dataclass
class RemoteRun:
    """What one remote execution returned, reduced to what scoring needs."""

    ok: bool
    stdout: str
    reason: str | None = None


_UNANSWERED: dict[str, GrpoError] = {}
"""Servers that took a request and never answered, this process: later calls fail at once, not after another wait."""


def _post(url: str, body: dict[str, Any], test_timeout: float, wait: float) -> dict[str, Any]:
    if url in _UNANSWERED:
        raise _UNANSWERED[url]
    timeout = test_timeout + wait
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8", "replace"))  # type: ignore[no-any-return]
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        if isinstance(exc, urllib.error.HTTPError) and exc.code < 500:
            raise GrpoError(f"the code sandbox at {url} refused the request: HTTP {exc.code} {exc.reason}",
                            where="rewards (code).params.backend_url",
                            fix="Check that backend_url points at the server's base address and that the "
                                "server runs Python.") from None
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            # A server that takes requests and never answers would score every test 0 after this wait, and
            # check-rewards would then call the reward fine: stop instead.
            _UNANSWERED[url] = GrpoError(
                f"the code sandbox at {url} accepted a request but sent no answer within {timeout:g} s (the test's "
                f"timeout + backend_wait, {wait:g} s)", where="rewards (code).params.backend_url",
                fix="Check the server (its logs, its workers), point backend_url at a working one, raise "
                    "params.backend_wait for a slow one, or use `backend: local`.")
            raise _UNANSWERED[url] from None
        if isinstance(exc, urllib.error.HTTPError):
            return {"_error": f"{type(exc).__name__}: {exc}"}
        raise GrpoError(f"cannot reach the code sandbox at {url}: {getattr(exc, 'reason', exc)}",
                        where="rewards (code).params.backend_url",
                        fix="Start the server (or fix backend_url), or use `backend: local`.") from None
    except ValueError as exc:
        return {"_error": f"the server's answer is not JSON: {exc}"}


def run_remote(backend: str, url: str, source: str, stdin: str, *, timeout: float, memory_mb: int,
               image: str | None, wait: float) -> RemoteRun:
    """Run one program on a remote backend; network failures raise GrpoError, program failures do not. The
    answer is awaited `timeout + wait` seconds (the reward's `backend_wait`)."""
    if backend in ("e2b", "morph"):
        return RemoteRun(*run_cloud(backend, url or None, image, source, stdin, timeout=timeout, memory_mb=memory_mb,
                                    wait=wait))
    base = url.rstrip("/")
    if backend == "piston":
        answer = _post(f"{base}/api/v2/execute", {
            "language": "python", "version": "*", "files": [{"name": "main.py", "content": source}],
            "stdin": stdin, "run_timeout": int(timeout * 1000), "run_memory_limit": memory_mb * 1024 * 1024,
        }, timeout, wait)
        run = answer.get("run") or {}
        if "_error" in answer or not run:
            return RemoteRun(False, "", answer.get("_error") or answer.get("message") or "no `run` in the answer")
        ok = run.get("code") == 0 and not run.get("signal")
        return RemoteRun(ok, str(run.get("stdout") or ""), None if ok else f"exit {run.get('code')} "
                         f"{run.get('signal') or ''}".strip())
    answer = _post(f"{base}/run_code", {
        "code": source, "language": "python", "stdin": stdin, "run_timeout": timeout,
        "memory_limit_MB": memory_mb,
    }, timeout, wait)
    result = answer.get("run_result") or {}
    if "_error" in answer or not result:
        return RemoteRun(False, "", answer.get("_error") or answer.get("message") or str(answer.get("status")))
    ok = answer.get("status") == "Success" and result.get("status") == "Finished" and result.get("return_code") == 0
    return RemoteRun(ok, str(result.get("stdout") or ""), None if ok else f"{result.get('status')} "
                     f"(return code {result.get('return_code')})")
