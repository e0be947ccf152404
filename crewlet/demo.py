"""``make run``: start one node with the example company on the embedded broker and show it working.

The node runs as a child process (``crewlet run``) in the foreground: this script waits for
``/ready``, prints what the node says about itself and the fleet view, then keeps the node serving
at the printed URL with the printed token until Ctrl-C (which drains the node, FL-129).

Environment: ``CREWLET_API_TOKEN`` (generated and printed when unset), ``CREWLET_PORT`` (default
8080), ``CREWLET_DATA_DIR`` (default ``./.crewlet``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from . import fleet_status

__all__ = ["main"]


def main() -> int:
    """Run the demo; return the node's exit code."""
    token = os.environ.get("CREWLET_API_TOKEN") or secrets.token_urlsafe(24)
    port = int(os.environ.get("CREWLET_PORT", "8080"))
    data_dir = Path(os.environ.get("CREWLET_DATA_DIR", ".crewlet"))
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "CREWLET_API_TOKEN": token}
    crewlet = str(Path(sys.executable).parent / "crewlet")
    log_path = data_dir / "node.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"starting a node with the example company (log: {log_path})", flush=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [crewlet, "run", "--port", str(port), "--data-dir", str(data_dir)],
            env=env,
            stdout=log,
            stderr=log,
        )
    signal.signal(signal.SIGINT, lambda *_: proc.send_signal(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"the node exited with {proc.returncode}; last log lines:")
            print("\n".join(log_path.read_text(errors="replace").splitlines()[-20:]))
            return proc.returncode or 1
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    else:
        print("the node did not become ready within 60 s; see", log_path)
        proc.terminate()
        return 1
    print(f"\nnode ready at {url}")
    print(json.dumps(httpx.get(url + "/health", timeout=5).json(), indent=2))
    fleet_status.show(url, token)
    print(f"\nThe node keeps serving at {url}")
    print(f"  export CREWLET_API_TOKEN={token}")
    print(f'  curl -H "Authorization: Bearer $CREWLET_API_TOKEN" {url}/fleet')
    print("Press Ctrl-C to drain and stop it.", flush=True)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
