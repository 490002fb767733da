"""``python -m genwire.providers.servers.xllama -m GGUF --host H --port P --alias NAME
[--ctx-size N] [--threads N]``: llama.cpp's HTTP server through xllamacpp (``genwire[local]``),
for ``kind: llama.cpp`` where no ``llama-server`` binary is installed (SPEC §23). It
answers as llama-server does (``/health`` 503 while loading, ``/v1/models``, the OpenAI
API) until it is stopped (SIGTERM)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m genwire.providers.servers.xllama", description=__doc__)
    parser.add_argument("-m", "--model", required=True, help="the GGUF file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", required=True, help="the name it serves the model under")
    parser.add_argument("-c", "--ctx-size", type=int, default=2048)
    parser.add_argument("-t", "--threads", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("-np", "--parallel", type=int, default=1)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        import xllamacpp as xlc
    except ImportError:
        sys.exit("xllamacpp is not installed: pip install 'genwire[local]'")
    params = xlc.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.model_alias = {args.alias}  # a set of names
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.n_gpu_layers = 0
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = args.threads
        cpu.poll = 0  # no busy-polling: other processes share the CPU
    params.ui = False
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xlc.Server(params)  # listens until it is dropped
    print(f"serving {args.alias} at {server.listening_address}", flush=True)
    stop.wait()
    del server


if __name__ == "__main__":
    main()
