"""A local stand-in of the Hugging Face Hub's API on 127.0.0.1, for ``genwire push``'s
tests (``HF_ENDPOINT`` points ``huggingface_hub`` at it). It implements just what
``HfApi.create_repo``, ``list_repo_files``, ``repo_info`` and ``create_commit`` send —
repo creation, the revision's info, the tree, ``preupload`` (every file "regular", with
the git blob id of the content it holds so the client can skip unchanged files) and the
NDJSON ``commit`` — over dataset repos kept in memory. A bearer token is required;
``forbid`` makes a repo answer 403 to writes."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

_REPO = r"/api/datasets/(?P<repo>[^/]+/[^/]+)"
_ROUTES = [
    ("POST", re.compile(r"/api/repos/create"), "create"),
    ("POST", re.compile(r"/api/validate-yaml"), "validate"),
    ("GET", re.compile(_REPO + r"(?:/revision/(?P<rev>[^/?]+))?"), "info"),
    ("GET", re.compile(_REPO + r"/tree/(?P<rev>[^/?]+)(?P<path>/[^?]*)?"), "tree"),
    ("POST", re.compile(_REPO + r"/preupload/(?P<rev>[^/?]+)"), "preupload"),
    ("POST", re.compile(_REPO + r"/commit/(?P<rev>[^/?]+)"), "commit"),
]


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class FakeRepo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)  # commit ids, oldest first

    @property
    def sha(self) -> str:
        return self.commits[-1] if self.commits else "0" * 40


class FakeHub:
    """``with FakeHub(token="hf_x") as hub:`` then ``HF_ENDPOINT=hub.url``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[str, FakeRepo] = {}
        self.forbidden: set[str] = set()
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def forbid(self, repo_id: str) -> None:
        self.forbidden.add(repo_id)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def _route(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                hub.requests.append((method, path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._answer(401, {"error": "Invalid credentials in Authorization header"})
                for verb, pattern, name in _ROUTES:
                    match = pattern.fullmatch(path)
                    if verb == method and match:
                        status, answer = getattr(hub, "_" + name)(body, **match.groupdict())
                        return self._answer(status, answer)
                self._answer(404, {"error": f"no route {method} {path}"})

            def _answer(self, status: int, answer: Any) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 404:
                    self.send_header("X-Error-Code", "RepoNotFound")
                self.end_headers()
                self.wfile.write(data)

        return Handler

    # --- the endpoints: (status, JSON answer) ---------------------------------------------

    def _repo(self, repo: str, write: bool = False) -> tuple[int, Any] | FakeRepo:
        if repo not in self.repos:
            return 404, {"error": "Repository not found"}
        if write and repo in self.forbidden:
            return 403, {"error": "You don't have the rights to write to this repository"}
        return self.repos[repo]

    def _create(self, body: bytes) -> tuple[int, Any]:
        payload = json.loads(body)
        repo_id = f"{payload.get('organization')}/{payload['name']}"
        if repo_id in self.forbidden:
            return 403, {"error": "You don't have the rights to create a repository here"}
        if repo_id in self.repos:
            return 409, {"error": "You already created this dataset repo", "url": f"{self.url}/datasets/{repo_id}"}
        self.repos[repo_id] = FakeRepo(private=payload.get("visibility") == "private")
        return 200, {"url": f"{self.url}/datasets/{repo_id}"}

    def _validate(self, body: bytes) -> tuple[int, Any]:
        """A README's metadata: the YAML front matter must parse into a mapping."""
        content = json.loads(body)["content"]
        match = re.match(r"---\n(.*?)\n---\n", content, re.S)
        try:
            meta = yaml.safe_load(match.group(1)) if match else None
        except yaml.YAMLError as exc:
            return 400, {"error": f"invalid YAML: {exc}"}
        if not isinstance(meta, dict):
            return 400, {"error": "no metadata (YAML front matter) in README.md"}
        return 200, {"warnings": []}

    def _info(self, body: bytes, repo: str, rev: str | None) -> tuple[int, Any]:
        found = self._repo(repo)
        if not isinstance(found, FakeRepo):
            return found
        return 200, {"id": repo, "sha": found.sha, "private": found.private}

    def _tree(self, body: bytes, repo: str, rev: str, path: str | None = None) -> tuple[int, Any]:
        found = self._repo(repo)
        if not isinstance(found, FakeRepo):
            return found
        files = sorted(found.files.items())
        return 200, [{"type": "file", "path": p, "size": len(c), "oid": git_blob_id(c)} for p, c in files]

    def _preupload(self, body: bytes, repo: str, rev: str) -> tuple[int, Any]:
        found = self._repo(repo, write=True)
        if not isinstance(found, FakeRepo):
            return found
        files = json.loads(body)["files"]
        return 200, {
            "files": [
                {
                    "path": f["path"],
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    "oid": git_blob_id(found.files[f["path"]]) if f["path"] in found.files else None,
                }
                for f in files
            ]
        }

    def _commit(self, body: bytes, repo: str, rev: str) -> tuple[int, Any]:
        found = self._repo(repo, write=True)
        if not isinstance(found, FakeRepo):
            return found
        for line in body.splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "file":
                found.files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "deletedFile":
                found.files.pop(value["path"], None)
            elif item["key"] == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                for path in [p for p in found.files if p.startswith(prefix)]:
                    del found.files[path]
            elif item["key"] != "header":
                return 400, {"error": f"the stand-in does not take {item['key']!r} lines"}
        digest = hashlib.sha1(repr(sorted(found.files.items())).encode() + str(len(found.commits)).encode())
        found.commits.append(digest.hexdigest())
        return 200, {
            "commitUrl": f"{self.url}/datasets/{repo}/commit/{found.sha}",
            "commitOid": found.sha,
            "pullRequestUrl": None,
        }
