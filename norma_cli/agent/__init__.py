"""Agent sessions (SPEC §16): ``norma run -p`` runs a model loop over the same executor.

* ``providers/`` — model endpoints: OpenAI-compatible chat completions and the Anthropic
  Messages API over httpx (streaming or not, retries honouring ``Retry-After``), plus kinds
  that plugins register with ``register_providers(register)``.
* ``loop.py`` — the loop and its hooks: SessionStart → UserPromptSubmit → model → one batch
  of tool calls through the executor → … → Stop → SessionEnd.
* ``transcript.py`` — the session's JSONL transcript and its ``messages`` rows; resume.
* ``subagent.py`` — the ``Task`` tool: a child session with its own agent's tool set.
* ``replay.py`` — ``norma policy replay``: today's decision for every recorded call.
"""
