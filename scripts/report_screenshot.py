"""Makes docs/images/report.png: a 3,000-row run against the fake server with a rate
limit (429 bursts), one slow model and a few refused requests, its report page opened
in headless Chromium at 1280 px (tests/browser.py) and saved as a screenshot.

    python scripts/report_screenshot.py [--rows 3000] [--out docs/images/report.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from genwire.engine.report import report_path  # noqa: E402
from genwire.testing import FakeOpenAIServer  # noqa: E402
from genwire.testing.fake_server import FakeResponse  # noqa: E402
from tests.browser import NO_CHROMIUM, find_chromium, open_page  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report.png")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        sys.exit(NO_CHROMIUM)
    with tempfile.TemporaryDirectory() as folder, FakeOpenAIServer() as server:
        tmp = Path(folder)
        server.set_latency("llama-3.1-8b-instruct", 0.04)
        server.set_latency("mixtral-8x22b-judge", 0.12)
        server.rate_limit(150, burst=40, retry_after=0.5, model="llama-3.1-8b-instruct")
        refused = FakeResponse(
            status=400, json={"error": {"message": "This model's maximum context length is exceeded"}}
        )
        server.fail_rate("mixtral-8x22b-judge", 0.03, statuses=(refused, 503), seed=5)
        config = {
            "providers": {
                "nim": {"kind": "openai", "base_url": server.url, "max_concurrency": 24, "retries": 2, "backoff_s": 0.2}
            },
            "models": {
                "writer": {"provider": "nim", "model": "llama-3.1-8b-instruct", "kind": "chat"},
                "judge": {"provider": "nim", "model": "mixtral-8x22b-judge", "kind": "chat"},
            },
            "pipeline": {
                "num_records": args.rows,
                "output": str(tmp / "qa.jsonl"),
                "max_failure_rate": 0.2,
                "columns": [
                    {
                        "name": "topic",
                        "generator": "sampler",
                        "params": {
                            "kind": "category",
                            "values": ["billing", "shipping", "returns", "warranty", "accounts"],
                        },
                    },
                    {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                    {
                        "name": "question",
                        "generator": "llm-text",
                        "resources": {"model": "writer"},
                        "params": {"prompt": "Write a customer question about {{ topic }} ({{ uid }})"},
                    },
                    {
                        "name": "verdict",
                        "generator": "llm-text",
                        "resources": {"model": "judge"},
                        "params": {"prompt": "Is this a clear question? {{ question }}"},
                    },
                ],
            },
        }
        (tmp / "genwire.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "genwire.cli.main", "run", str(tmp / "genwire.yaml"), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        summary = json.loads(proc.stdout)
        print(json.dumps(summary, indent=1))
        page = report_path(tmp / "qa.jsonl")
        visit = open_page(chromium, page, "document.title")
        if visit.console or visit.foreign_requests:
            sys.exit(f"the page misbehaved: {visit.console} {visit.foreign_requests}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(visit.screenshot)
        print(f"{page.stat().st_size:,} bytes of report; screenshot in {args.out}")


if __name__ == "__main__":
    main()
