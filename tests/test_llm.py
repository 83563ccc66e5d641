"""The OpenAI-compatible client, against a local stub server (http.server in a thread): success,
missing configuration, HTTP errors, malformed replies and unreachable servers, each with a clear
message."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grader.runtime import llm

REPLY = "Here it is:\n```python\nimport triton\n\ndef attention(q, k, v):\n    pass\n```\nDone."


class Stub:
    """A server whose next answer is set by the test; it records what it was sent."""

    def __init__(self):
        self.status = 200
        self.body = json.dumps({"choices": [{"message": {"role": "assistant", "content": REPLY}}]})
        self.delay = 0.0
        self.requests = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                stub.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(self.rfile.read(length) or b"null"),
                    }
                )
                time.sleep(stub.delay)
                payload = stub.body.encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # keep the test output clean
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that gave up waiting
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.closed = False
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        if not self.closed:
            self.closed = True
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def stub():
    server = Stub()
    yield server
    server.close()


def test_success_posts_the_prompt_and_returns_the_content(stub):
    config = llm.Config(stub.base + "/", "tiny-model", api_key="secret")
    reply = llm.chat("Write a kernel", config=config)
    assert reply == REPLY
    sent = stub.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["model"] == "tiny-model"
    assert sent["body"]["messages"][-1] == {"role": "user", "content": "Write a kernel"}
    assert sent["body"]["messages"][0]["role"] == "system"
    assert sent["headers"]["Authorization"] == "Bearer secret"
    assert "def attention" in llm.extract_code(reply) and "Done." not in llm.extract_code(reply)


def test_no_key_sends_no_authorization_header(stub):
    llm.chat("hi", config=llm.Config(stub.base, "m"), system=None)
    sent = stub.requests[0]
    assert "Authorization" not in sent["headers"]
    assert sent["body"]["messages"] == [{"role": "user", "content": "hi"}]


def test_configuration_comes_from_the_environment():
    assert llm.config_from_env({}) is None
    config = llm.config_from_env(
        {llm.BASE_URL: "http://localhost:8080/v1", llm.MODEL: "qwen", llm.API_KEY: "k"}
    )
    assert config == llm.Config("http://localhost:8080/v1", "qwen", "k")
    assert "k" not in repr(config).replace("key set", "") and "api key set" in repr(config)
    with pytest.raises(llm.LLMError, match="COURSE_LLM_MODEL is not set"):
        llm.config_from_env({llm.BASE_URL: "http://localhost:8080/v1"})
    with pytest.raises(llm.LLMError, match="COURSE_LLM_BASE_URL is not set"):
        llm.config_from_env({llm.MODEL: "qwen"})
    with pytest.raises(llm.LLMError, match="must start with http"):
        llm.config_from_env({llm.BASE_URL: "localhost:8080", llm.MODEL: "qwen"})
    assert "COURSE_LLM_BASE_URL" in llm.not_configured() and "drafts" in llm.not_configured()


def test_http_errors_name_the_status_and_the_servers_words(stub):
    stub.status = 401
    stub.body = json.dumps({"error": {"message": "invalid api key"}})
    with pytest.raises(llm.LLMError, match="HTTP 401.*invalid api key"):
        llm.chat("hi", config=llm.Config(stub.base, "m"))


@pytest.mark.parametrize(
    "body, words",
    [
        ("<html>busy</html>", "not JSON"),
        (json.dumps({"object": "list", "data": []}), "without choices"),
        (json.dumps({"choices": []}), "without choices"),
        (json.dumps({"choices": [{"message": {"content": "  "}}]}), "empty message"),
    ],
)
def test_malformed_replies_are_said_plainly(stub, body, words):
    stub.body = body
    with pytest.raises(llm.LLMError, match=words):
        llm.chat("hi", config=llm.Config(stub.base, "m"))


def test_an_unreachable_server_is_said_plainly(stub):
    base = stub.base
    stub.close()
    with pytest.raises(llm.LLMError, match="could not reach"):
        llm.chat("hi", config=llm.Config(base, "m", timeout=5))


def test_a_slow_server_times_out(stub):
    stub.delay = 1.0
    with pytest.raises(llm.LLMError, match="did not answer|could not reach"):
        llm.chat("hi", config=llm.Config(stub.base, "m", timeout=0.2))


def test_extract_code_takes_the_longest_block_or_everything():
    two = "```python\nx = 1\n```\nand\n```\ny = 2\nz = 3\n```"
    assert llm.extract_code(two) == "y = 2\nz = 3\n"
    assert llm.extract_code("def f():\n    return 1") == "def f():\n    return 1\n"
