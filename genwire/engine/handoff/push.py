"""``genwire push``: export a finished run and upload it to the Hugging Face Hub in one
commit (SPEC §24), with ``huggingface_hub`` (the extra ``genwire[hub]``).

The token is the library's own: ``HF_TOKEN`` or the stored Hugging Face login, found by
``huggingface_hub`` itself; genwire never reads, passes, writes or shows it (every
message is scrubbed of it all the same). A second push of the same run changes nothing:
the export is deterministic, and ``create_commit`` drops every file whose content the Hub
already holds (the preupload endpoint's ``oid``), making no commit when none is left.
Shards of an earlier push that this export does not write are deleted in the same commit."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.engine.handoff.export import export
from genwire.engine.handoff.finished import finished_run
from genwire.errors import GenwireError, RunSetupError
from genwire.scrub import scrub

MANAGED = ("README.md", "data/", "rejected/")  # what a push owns in the repo


class PushFailed(GenwireError):
    """The upload failed (no network, 401, 403, a missing repo or revision): exit 1."""


@dataclass
class Pushed:
    url: str
    changed: bool  # False: the Hub already held exactly these files
    files: int


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise RunSetupError("genwire push needs huggingface_hub: pip install 'genwire[hub]'") from None
    return huggingface_hub


def push(
    output: Path, repo_id: str, *, private: bool = False, revision: str | None = None, with_rejected: bool = False
) -> Pushed:
    hub = _hub()
    finished_run(output)  # refused before anything is exported or sent
    api = hub.HfApi()
    secret = hub.get_token() or ""
    # The library's own warnings ("No files have been modified...") would repeat what the
    # command says; its errors come back as exceptions, said once below.
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="genwire-push-") as tmp:
            # The Hub first: an unreachable endpoint or a refused token fails before any export work.
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            present = set(api.list_repo_files(repo_id, repo_type="dataset", revision=revision))
            exported = export(output, Path(tmp), with_rejected=with_rejected)
            adds = [
                hub.CommitOperationAdd(path_in_repo=path.relative_to(tmp).as_posix(), path_or_fileobj=str(path))
                for path in exported.files
            ]
            new = {op.path_in_repo for op in adds}
            stale = [p for p in sorted(present - new) if p.startswith(MANAGED[1:]) and p.endswith(".parquet")]
            operations = [*adds, *(hub.CommitOperationDelete(path_in_repo=p) for p in stale)]
            before = _head(api, repo_id, revision)
            info = api.create_commit(
                repo_id,
                operations,
                commit_message=f"genwire push: {exported.rows:,} rows from {output.name}",
                repo_type="dataset",
                revision=revision,
            )
    except RunSetupError:
        raise
    except Exception as exc:  # the library's HTTP and network errors, whatever their class
        raise PushFailed(_failure(exc, repo_id, secret)) from None
    return Pushed(str(info.commit_url), info.oid != before, len(exported.files))


def _head(api: Any, repo_id: str, revision: str | None) -> str | None:
    return getattr(api.repo_info(repo_id, repo_type="dataset", revision=revision), "sha", None)


def _failure(exc: BaseException, repo_id: str, secret: str) -> str:
    """One line saying what failed and what to do (the token masked, whatever echoed it)."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if status == 401:
        what = "the Hub refused the token (401): set HF_TOKEN or run `hf auth login` with a token that has write access"
    elif status == 403:
        what = f"the token may not write to {repo_id} (403): use a token with write access to it"
    elif status == 404:
        what = (
            f"no dataset repo or revision {repo_id} the token can see (404): check the name, the revision and the token"
        )
    elif status is not None:
        what = f"the Hub answered {status}"
    else:
        what = "cannot reach the Hub (check the network, or HF_ENDPOINT)"
    return scrub(f"push to {repo_id} failed: {what}: {first[:300]}", [secret])
