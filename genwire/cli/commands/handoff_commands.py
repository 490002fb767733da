"""``genwire card``, ``export`` and ``push``: hand a finished run's dataset over (SPEC §24).
Heavy imports (pyarrow, huggingface_hub) stay inside the commands that need them:
registering these costs nothing. A run that has not finished is refused (exit 2) with
what to do; a failed upload is one message (exit 1); a missing extra names its install
(exit 2)."""

from __future__ import annotations

from pathlib import Path

import click

from genwire.cli.errors import handle_errors

__all__ = ["card", "export_command", "push_command"]

_OUTPUT = click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
_REJECTED = click.option(
    "--with-rejected", is_flag=True, help="Add the rejected candidates as a second config, `rejected` (gated runs)."
)


@click.command()
@_OUTPUT
@click.option("-o", "--out", "target", type=click.Path(dir_okay=False, path_type=Path), help="Write the card to FILE.")
@_REJECTED
@handle_errors
def card(output: Path, target: Path | None, with_rejected: bool) -> None:
    """Print (or write) the dataset card of the finished run that wrote OUTPUT."""
    from genwire.cli.text_output import print_or_write
    from genwire.engine.handoff.card import render_card
    from genwire.engine.handoff.finished import finished_run

    print_or_write(render_card(finished_run(output), with_rejected=with_rejected), target, "the card")


@click.command("export")
@_OUTPUT
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@_REJECTED
@handle_errors
def export_command(output: Path, directory: Path, with_rejected: bool) -> None:
    """Write DIRECTORY: the card and the rows as Parquet, as `datasets.load_dataset(DIRECTORY)` loads them."""
    from genwire.engine.handoff.export import export

    done = export(output, directory, with_rejected=with_rejected)
    extra = f" and {done.rejected:,} rejected candidates" if with_rejected else ""
    click.echo(f"exported {done.rows:,} rows in {len(done.shards)} shard(s){extra} to {directory}")


@click.command("push")
@_OUTPUT
@click.argument("repo_id")
@click.option("--private", is_flag=True, help="Create the dataset repo private (when it does not exist yet).")
@click.option("--revision", help="The branch to commit to (default: main).")
@_REJECTED
@handle_errors
def push_command(output: Path, repo_id: str, private: bool, revision: str | None, with_rejected: bool) -> None:
    """Export the finished run that wrote OUTPUT and upload it to the Hub dataset REPO_ID in one commit.

    The token is HF_TOKEN or the Hugging Face login; it is never written or shown. Needs
    pip install 'genwire[hub]'."""
    from genwire.engine.handoff.push import push

    done = push(output, repo_id, private=private, revision=revision, with_rejected=with_rejected)
    if done.changed:
        click.echo(f"pushed {done.files} file(s) to {repo_id}: {done.url}")
    else:
        click.echo(f"{repo_id} already holds this export: nothing changed ({done.url})")
