"""Helpers for the dashboard's browser tests and bench/ui.py: `hetflow ui` as a real
subprocess, a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by
selenium, screenshots under tests/output/ui, and a synthetic store built with the Store API."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.integration.hfkit import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = ROOT / "tests" / "output" / "ui"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not exe.exists():
            return f"{exe} is missing: apt-get install chromium chromium-driver (make test installs them)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is missing: pip install -e '.[test]'"
    return None


def chromium(width: int = 1400, height: int = 1000, *, performance_log: bool = False) -> Any:
    """A headless Chromium with a fixed window; the driver and browser are given by path,
    so selenium-manager never reaches for the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(arg)
    # the console too: a Content-Security-Policy violation is reported there (csp_violations)
    options.set_capability(
        "goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if performance_log else {})}
    )
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def csp_violations(driver: Any) -> list[str]:
    """The console's reports of what the page's Content-Security-Policy refused."""
    return [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e.get("message", "")]


def non_loopback_ip() -> str:
    """One of this machine's addresses that is not loopback (IPv4 first)."""
    words = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    for w in sorted(words, key=lambda a: ":" in a):
        if not w.startswith("127.") and w != "::1":
            return w
    return "0.0.0.0"


class Dashboard:
    """``hetflow ui`` running in a child process, answering on ``base``."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.host = host
        self.token: str | None = (env or {}).get("HETFLOW_UI_TOKEN")
        if "--token" in args:
            self.token = args[args.index("--token") + 1]
        full = {**(env if env is not None else os.environ), "HETFLOW_HOME": str(home)}
        full["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), full.get("PYTHONPATH", "")])
        self.log = home.parent / f"ui-{self.port}.log"
        home.mkdir(parents=True, exist_ok=True)
        self._out = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hetflow.cli.main", "ui", "--host", host, "--port", str(self.port), *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full,
            cwd=ROOT,
        )
        shown = f"[{host}]" if ":" in host else host
        self.base = f"http://{'127.0.0.1' if host == '0.0.0.0' else shown}:{self.port}"
        self._wait()

    def _wait(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"hetflow ui exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(self.base + "/api/config", headers=headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"hetflow ui did not answer in {timeout} s:\n{self.log.read_text()}")

    def url(self, fragment: str = "#/runs", token: bool = True) -> str:
        query = f"?token={self.token}" if token and self.token else ""
        return f"{self.base}/{query}{fragment}"

    def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        answer = httpx.get(self.base + path, headers=headers, timeout=30)
        assert answer.status_code == 200, (path, answer.status_code, answer.text)
        return answer.json()

    def printed_url(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._out.close()


@contextmanager
def dashboard(
    home: Path, *args: str, env: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> Iterator[Dashboard]:
    ui = Dashboard(home, *args, env=env, host=host)
    try:
        yield ui
    finally:
        ui.stop()


def wait_until(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.time() + timeout
    last: Any = None
    while time.time() < deadline:
        try:
            last = predicate()
        except Exception:  # a stale element while the page re-renders: try again
            last = None
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not met in {timeout} s")


def rendered(driver: Any, view: str, timeout: float = 30) -> None:
    """Wait for the page to say it has rendered ``view`` (body data-view / data-ready)."""

    def done() -> bool:
        return bool(
            driver.execute_script(
                "return document.body.dataset.view === arguments[0] && document.body.dataset.ready === '1'", view
            )
        )

    try:
        wait_until(done, timeout, f"view {view} rendered")
    except AssertionError:
        error = driver.execute_script("const e = document.getElementById('error'); return e ? e.textContent : ''")
        raise AssertionError(f"view {view} did not render in {timeout} s; #error says: {error!r}") from None


def screenshot(driver: Any, name: str) -> Path:
    """Save the window as tests/output/ui/NAME.png; print where it went."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


# ---------------------------------------------------------------- a synthetic store


def synthetic_run(
    store: Any,
    home: Path,
    run_id: str,
    *,
    name: str = "synthetic",
    steps: list[str],
    workflow_yaml: str | None = None,
    state: str = "succeeded",
    created: float | None = None,
    log_lines: int = 3,
    backend: str = "local",
    plan_json: str | None = None,
    node: str = "localhost",
    gpus: tuple[int, ...] = (),
) -> None:
    """A finished (or failed / stopped / pending) run recorded with the Store API: its steps
    taken through their legal states, one attempt each with a log in the executor's format,
    and, when given, its workflow copy where the run's workdir keeps it (so the DAG has edges)."""
    from hetflow.state import AttemptRecord

    workdir = home / "runs" / run_id
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    if workflow_yaml is not None:
        (workdir / "workflow.yaml").write_text(workflow_yaml)
    store.create_run(
        run_id=run_id,
        name=name,
        workflow_file=str(workdir / "workflow.yaml"),
        spec_json="{}",
        params_json="{}",
        uid=os.getuid(),
        gid=os.getgid(),
        workdir=str(workdir),
        steps=steps,
        backend=backend,
        plan_json=plan_json,
    )
    t0 = created if created is not None else time.time() - 100
    if state == "pending":
        return
    store.set_run(run_id, state="running", started=t0)
    step_state = {"succeeded": "succeeded", "failed": "failed", "stopped": "stopped", "running": "running"}[state]
    for i, step in enumerate(steps):
        start = t0 + i * 0.01
        store.set_step(run_id, step, state="launching", event="launching")
        store.set_step(run_id, step, state="running", started=start, event="started")
        store.add_attempt(
            AttemptRecord(
                run_id=run_id,
                step=step,
                attempt=1,
                variant="default",
                node=node,
                gpus=gpus,
                gpu_uuids=(),
                container=f"hf-{run_id}-{step}",
                image="localhost/x@sha256:" + "0" * 64,
                state="running",
                exit_code=None,
                started=start,
                ended=None,
                message="",
            )
        )
        with (workdir / "logs" / f"{step}.1.log").open("w") as f:
            for n in range(log_lines):
                f.write(f"2026-01-01T00:00:0{n % 10}.000000000Z stdout F {step} line {n}\n")
        if step_state == "running":
            continue
        exit_code = 0 if step_state == "succeeded" else (1 if step_state == "failed" else 137)
        store.set_attempt(run_id, step, 1, state=step_state, exit_code=exit_code, ended=start + 1)
        store.set_step(run_id, step, state=step_state, ended=start + 1, event=step_state)
    if state != "running":
        store.set_run(run_id, state=state, ended=t0 + len(steps) * 0.01 + 1)


def layered_workflow(steps: int, width: int = 50, image: str = "localhost/hetflow-test/busybox:latest") -> str:
    """A workflow YAML of ``steps`` steps in layers of ``width``: each step needs up to two
    steps of the layer before (so the DAG has about 2 edges per step)."""
    lines = ["apiVersion: hetflow/v1", "name: layered", "steps:"]
    for i in range(steps):
        layer, pos = divmod(i, width)
        lines += [f"  s{i}:", f"    image: {image}", '    command: [sh, -c, "echo hi"]']
        if layer:
            prev = (layer - 1) * width
            needs = sorted({prev + pos, prev + (pos * 7 + 3) % width})
            lines.append(f"    needs: [{', '.join(f's{n}' for n in needs)}]")
    return "\n".join(lines) + "\n"
