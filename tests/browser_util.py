"""Helpers for the browser tests: a free port, the app's pages read from app.py, a Streamlit server, and waiting
until a Streamlit page has finished its script run."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app.py"
# Screenshots go to a scratch folder unless EDITKIT_SCREENSHOTS names one (EDITKIT_SCREENSHOTS=assets/screenshots
# refreshes the README's and the manual's pictures): a test run never writes into tracked files unless asked.
SHOTS = Path(os.environ.get("EDITKIT_SCREENSHOTS") or Path(tempfile.gettempdir()) / "editkit-screenshots")


def own_address() -> str | None:
    """A non-loopback address of this machine (to reach the server as a visitor from elsewhere would), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pages() -> list[tuple[str, str, str]]:
    """(name, url path, title) of every page in app.py's PAGES, in order (read from the source, so pages added
    later are covered without importing Streamlit). The default page (a function) is "home" at "/"; a module's
    main() and a file page are at their url_path."""
    text = APP.read_text(encoding="utf-8")
    block = text[text.index("PAGES = ["):]
    block = block[:block.index("\n]") + 2]
    pages = []
    for m in re.finditer(r'st\.Page\(\s*([^,]+?)\s*,\s*title="([^"]+)"[^\n]*', block):
        target, title, line = m.group(1), m.group(2), m.group(0)
        path = re.search(r'url_path="([^"]+)"', line)
        if path:
            pages.append((path.group(1), path.group(1), title))
        elif target.startswith(("'", '"')):
            stem = Path(target.strip("'\"")).stem
            pages.append((stem, stem, title))
        else:
            pages.append((target, "", title))  # a function page: the default one, served at "/"
    return pages


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def start_streamlit(port: int, address: str | None = "127.0.0.1") -> subprocess.Popen:
    """`streamlit run app.py` on `port`, listening on `address` (None: Streamlit's default, every address of
    the machine; an IPv4 browser then arrives as an IPv4-mapped IPv6 address, ::ffff:127.0.0.1)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
           "--server.port", str(port), *(["--server.address", address] if address else []),
           "--browser.gatherUsageStats", "false"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)



def stop_streamlit(proc: subprocess.Popen) -> None:
    """Stop a server start_streamlit started (its whole process group); a stuck one is killed outright."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, OSError):
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"streamlit did not answer at {url} within {timeout} s")


def wait_idle(page, timeout: float = 180, quiet: float = 2.0) -> None:
    """Wait until the script run is over: the app is drawn and the "Running..." status widget has been gone for
    `quiet` seconds (a rerun triggered by a widget brings it back)."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    end, idle_since = time.time() + timeout, None
    while time.time() < end:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0 or \
            page.locator('[data-testid="stSkeleton"]').count() > 0
        if running:
            idle_since = None
        elif idle_since is None:
            idle_since = time.time()
        elif time.time() - idle_since >= quiet:
            return
        page.wait_for_timeout(250)
    raise TimeoutError(f"the page was still running after {timeout} s")
