"""Ask a language model for a draft through any OpenAI-compatible chat endpoint, with the standard
library only (urllib, json): POST {base}/chat/completions.

Configured by environment variables, so that no key is ever written into a notebook:
  COURSE_LLM_BASE_URL  e.g. http://localhost:8080/v1 (llama.cpp's server), http://localhost:8000/v1
                       (vLLM), or a hosted service's /v1 address
  COURSE_LLM_MODEL     the model name the server expects
  COURSE_LLM_API_KEY   optional; sent as "Authorization: Bearer ..." when set
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

BASE_URL = "COURSE_LLM_BASE_URL"
MODEL = "COURSE_LLM_MODEL"
API_KEY = "COURSE_LLM_API_KEY"

SYSTEM = (
    "You are an expert GPU kernel engineer. Answer with one complete Python module in a single "
    "```python code block."
)


class LLMError(RuntimeError):
    """The endpoint could not be reached, refused the request, or answered in an unknown form."""


@dataclass(frozen=True)
class Config:
    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 300.0

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def __repr__(self) -> str:  # never print the key
        key = "set" if self.api_key else "not set"
        return f"Config(base_url={self.base_url!r}, model={self.model!r}, api key {key})"


def config_from_env(env: Mapping[str, str] | None = None) -> Config | None:
    """The endpoint named by the environment; None when neither variable is set. Raises LLMError
    when only one of COURSE_LLM_BASE_URL and COURSE_LLM_MODEL is set."""
    env = os.environ if env is None else env
    base = (env.get(BASE_URL) or "").strip()
    model = (env.get(MODEL) or "").strip()
    if not base and not model:
        return None
    if not base or not model:
        missing = BASE_URL if not base else MODEL
        raise LLMError(f"{missing} is not set: set both {BASE_URL} and {MODEL}, or neither")
    if not base.startswith(("http://", "https://")):
        raise LLMError(f"{BASE_URL} must start with http:// or https://, got {base!r}")
    return Config(base, model, (env.get(API_KEY) or "").strip() or None)


def not_configured() -> str:
    """The sentence for a notebook with no endpoint configured."""
    return (
        f"No language model is configured ({BASE_URL} and {MODEL} are not set), so this "
        "notebook uses the drafts shipped in drafts/. To try your own prompt, start any "
        "OpenAI-compatible server (llama.cpp's llama-server, vLLM, or a hosted one), set "
        f"{BASE_URL} (e.g. http://localhost:8080/v1), {MODEL} and, if it needs one, "
        f"{API_KEY}, then restart the notebook."
    )


def chat(prompt: str, *, config: Config, system: str | None = SYSTEM) -> str:
    """The model's reply to `prompt` (the first choice's message content)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}
    ]
    body = {"model": config.model, "messages": messages, "temperature": 0.2}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    request = urllib.request.Request(
        config.url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()[:300]
        said = f": {detail}" if detail else ""
        raise LLMError(f"{config.url} answered HTTP {exc.code} {exc.reason}{said}") from None
    except urllib.error.URLError as exc:
        raise LLMError(f"could not reach {config.url}: {exc.reason}") from None
    except TimeoutError:
        raise LLMError(f"{config.url} did not answer within {config.timeout:g} s") from None
    try:
        reply = json.loads(raw)
    except json.JSONDecodeError:
        start = raw[:120].decode(errors="replace")
        raise LLMError(f"{config.url} answered with something not JSON: {start!r}") from None
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(
            f"{config.url} answered JSON without choices[0].message.content: "
            f"{json.dumps(reply)[:200]}"
        ) from None
    if not isinstance(content, str) or not content.strip():
        raise LLMError(f"{config.url} answered with an empty message")
    return content


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(reply: str) -> str:
    """The longest fenced code block in `reply`, or the whole reply when it has none."""
    blocks = _FENCE.findall(reply)
    return max(blocks, key=len).strip() + "\n" if blocks else reply.strip() + "\n"
