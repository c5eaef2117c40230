"""Screenshots of every page of ``ctxos ui`` for docs/ui.md (``python scripts/ui_screenshots.py``).

Replays the bundled session into a temporary store, serves it, and saves one PNG per page into
docs/ui/ from the system's headless Chromium (tests/ui/browser.py)."""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ui.browser import chrome, console_errors  # noqa: E402
from tests.ui.recorded import record_demo  # noqa: E402

from context_os.server.ui import make_ui_server  # noqa: E402
from context_os.store.sqlite import SqliteStore  # noqa: E402

OUT = ROOT / "docs" / "ui"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        store = SqliteStore(Path(d) / "store.db")
        record_demo(store, "demo")
        file = max((v.id for v in store.find("file")), key=lambda i: len(store.history(i, with_docs=False)))
        first = store.history(file, with_docs=False)[2]
        server = make_ui_server(store, 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        driver = chrome(Path(d) / "profile", width=1400, height=900)
        try:
            for name, path in (
                ("sessions", "/"),
                ("timeline", "/session?id=demo&turn=1"),
                ("frame", "/frame?session=demo&turn=40"),
                ("diff", "/diff?session=demo&a=42&b=43"),
                ("object", f"/object?id={file}&vt={first.valid_time}&tx={first.tx_id}"),
            ):
                driver.get(base + path)
                driver.save_screenshot(str(OUT / f"{name}.png"))
                errors = console_errors(driver)
                print(f"{name}: {OUT / (name + '.png')}" + (f" console errors: {errors}" if errors else ""))
        finally:
            driver.quit()
            server.shutdown()
            server.server_close()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
