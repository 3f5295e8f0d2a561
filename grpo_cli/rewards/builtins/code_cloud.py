"""E2B and Morph Cloud as backends of the `code` reward, over their plain HTTP APIs (no SDK needed).

Both are hosted services behind an API key. The requests below follow their SDKs' source (e2b 2.63 with
e2b-code-interpreter 2.11, morphcloud 0.1.116); they were NOT run against the services (the development
machine reaches no network beyond package registries), so a live call is unverified. What is tested here is
what needs no service: the settings, the missing key, an address that cannot be reached.

* E2B: `POST {api}/sandboxes` (header `X-API-KEY`, body `{"templateID", "timeout"}`) answers `sandboxID`,
  `domain` and `envdAccessToken`; code runs with `POST https://49999-{sandboxID}.{domain}/execute`
  (`{"code", "language": "python"}`, header `X-Access-Token`), which streams JSON lines (`stdout`, `stderr`,
  `error`, ...); `DELETE {api}/sandboxes/{id}` ends the sandbox.
* Morph Cloud: `POST {api}/instance?snapshot_id=S` (header `Authorization: Bearer KEY`) starts an instance of
  a snapshot, `GET {api}/instance/{id}` until its `status` is `ready`; `POST {api}/instance/{id}/exec` with
  `{"command": [...]}` answers `exit_code`, `stdout`, `stderr`; `DELETE {api}/instance/{id}` stops it.

One sandbox (or instance) per process, made on first use and removed at exit. Each test runs inside it as a
child Python process (a small runner given the program and stdin in base64), so stdin, the per-test timeout,
the memory limit and the exit code mean what they mean in the local sandbox.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from grpo_cli.errors import GrpoError

CLOUD = {"e2b": ("E2B_API_KEY", "https://api.e2b.app"), "morph": ("MORPH_API_KEY", "https://cloud.morph.so/api")}
"""backend -> (the environment variable holding its API key, its default API address)."""
E2B_TEMPLATE = "code-interpreter-v1"
E2B_PORT = 49999  # the code interpreter's port inside an E2B sandbox
_MARK = "@@grpo-run@@"
_RUNNER = """import base64, json, resource, subprocess, sys
src = base64.b64decode({src!r}).decode(); stdin = base64.b64decode({stdin!r}).decode()
def limit():
    resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
try:
    r = subprocess.run([sys.executable, "-c", src], input=stdin, capture_output=True, text=True,
                       timeout={timeout}, preexec_fn=limit)
    out = {{"code": r.returncode, "stdout": r.stdout[-65536:]}}
except subprocess.TimeoutExpired:
    out = {{"code": None, "stdout": "", "reason": "timed out"}}
print({mark!r} + json.dumps(out))
"""


def config_problem(backend: str, image: str | None) -> str | None:
    """What stops a cloud backend before any call (the key, the snapshot), or None; validate reports it."""
    if backend not in CLOUD:
        return None
    variable = CLOUD[backend][0]
    if not os.environ.get(variable):
        return f"the {backend} backend reads its API key from ${variable}, which is not set"
    if backend == "morph" and not image:
        return "the morph backend starts an instance of a snapshot: give its id as `backend_image` (one with python3)"
    return None


def _request(method: str, url: str, headers: dict[str, str], body: Any = None, timeout: float = 60.0) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        what = "refused the API key" if exc.code in (401, 403) else f"answered HTTP {exc.code} {exc.reason}"
        raise GrpoError(f"{url} {what}", where="rewards (code).params.backend",
                        fix="Check the API key, `backend_url` and `backend_image`, or use `backend: local`.") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise GrpoError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}", where="rewards (code).params.backend_url",
                        fix="Check the address (the default is the service's own), or use `backend: local`.") from None


class _Session:
    """One E2B sandbox or Morph instance, made on first use and removed when the process exits."""

    def __init__(self, backend: str, api: str, image: str | None) -> None:
        problem = config_problem(backend, image)
        if problem:
            raise GrpoError(problem, where="rewards (code).params.backend",
                            fix=f"export {CLOUD[backend][0]}=... (and see docs/rewards.md), or use `backend: local`.")
        self.backend, self.api, self.key = backend, api.rstrip("/"), os.environ[CLOUD[backend][0]]
        self.auth = {"X-API-KEY": self.key} if backend == "e2b" else {"Authorization": f"Bearer {self.key}"}
        if backend == "e2b":
            made = json.loads(_request("POST", f"{self.api}/sandboxes", self.auth,
                                       {"templateID": image or E2B_TEMPLATE, "timeout": 3600}))
            self.id = made["sandboxID"]
            self.run_url = f"https://{E2B_PORT}-{self.id}.{made.get('domain') or 'e2b.app'}/execute"
            self.run_headers = {"X-Access-Token": made.get("envdAccessToken") or "", "E2b-Sandbox-Id": self.id,
                                "E2b-Sandbox-Port": str(E2B_PORT)}
            if made.get("trafficAccessToken"):
                self.run_headers["E2B-Traffic-Access-Token"] = made["trafficAccessToken"]
            self.end = ("DELETE", f"{self.api}/sandboxes/{self.id}")
        else:
            made = json.loads(_request("POST", f"{self.api}/instance?snapshot_id={image}", self.auth, {}))
            self.id = made["id"]
            self._wait_ready()
            self.end = ("DELETE", f"{self.api}/instance/{self.id}")
        atexit.register(self.close)

    def _wait_ready(self, limit: float = 300.0) -> None:
        started = time.monotonic()
        while True:
            status = json.loads(_request("GET", f"{self.api}/instance/{self.id}", self.auth)).get("status")
            if status == "ready":
                return
            if status == "error" or time.monotonic() - started > limit:
                raise GrpoError(f"the Morph instance {self.id} did not become ready (status {status})",
                                where="rewards (code).params.backend_image", fix="Check the snapshot id.")
            time.sleep(2.0)

    def run(self, code: str, timeout: float) -> str:
        """Run Python source in the sandbox; its stdout."""
        if self.backend == "e2b":
            raw = _request("POST", self.run_url, self.run_headers, {"code": code, "language": "python"}, timeout)
            lines = [json.loads(line) for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
            return "".join(str(x.get("text", "")) for x in lines if x.get("type") == "stdout")
        answer = json.loads(_request("POST", f"{self.api}/instance/{self.id}/exec", self.auth,
                                     {"command": ["python3", "-c", code]}, timeout))
        return str(answer.get("stdout") or "")

    def close(self) -> None:
        with contextlib.suppress(GrpoError):  # gone already, or unreachable at exit: the service's timeout ends it
            _request(*self.end, self.auth, timeout=10.0)


_SESSIONS: dict[tuple[str, str, str | None], _Session] = {}
_LOCK = threading.Lock()


def run_cloud(backend: str, api: str | None, image: str | None, source: str, stdin: str, *, timeout: float,
              memory_mb: int, wait: float) -> tuple[bool, str, str | None]:
    """(ok, stdout, why not) of one program with `stdin` in this process's sandbox."""
    key = (backend, api or CLOUD[backend][1], image)
    with _LOCK:
        session = _SESSIONS.get(key) or _SESSIONS.setdefault(key, _Session(backend, key[1], image))
    return read_runner(session.run(runner_source(source, stdin, timeout, memory_mb), timeout + wait))


def runner_source(source: str, stdin: str, timeout: float, memory_mb: int) -> str:
    """The Python the sandbox runs for one test: the program as a child process, fed `stdin`, limited."""
    return _RUNNER.format(src=base64.b64encode(source.encode()).decode(), mem=memory_mb * 2**20,
                          stdin=base64.b64encode(stdin.encode()).decode(), timeout=timeout, mark=_MARK)


def read_runner(stdout: str) -> tuple[bool, str, str | None]:
    """(ok, the program's stdout, why not) from what the runner printed."""
    found = [line for line in stdout.splitlines() if line.startswith(_MARK)]
    if not found:
        return False, "", "the sandbox gave no result"
    out = json.loads(found[-1][len(_MARK):])
    ok = out.get("code") == 0
    return ok, str(out.get("stdout") or ""), None if ok else out.get("reason") or f"exit {out.get('code')}"
