"""A real HTTP server on loopback that speaks the OpenAI chat-completions API and replays a script.

Tests, the CLI check and the web app's end-to-end test drive the agent through the real `openai`
client against this server, so everything from HTTP to tool-call parsing is exercised. Each
POST /v1/chat/completions consumes the next reply of the script:

    {"content": "...", "reasoning": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}
    {"tool_calls": [{"name": "write_file", "arguments_raw": "{not json"}]}   # malformed on purpose
    {"status": 429, "error": "slow down", "headers": {"retry-after": "0"}}    # an error response
    {"text": "raw assistant text"}                                            # verbatim content

A request that carries no `tools` (the text protocol) gets the same reply with its tool calls
written as ```tool {json}``` blocks in the content. Script-level keys: "models" (served ids;
another model gets 404; without the key any name is served), "api_key" (when set, another key gets 401), "tools_supported" (false:
a request with `tools` gets 400), "when_exhausted" ("finish": answer with a finish call,
"error": HTTP 500). GET /v1/models lists the models; GET /_scripted/requests returns the
request bodies received so far (for assertions); POST /_scripted/script replaces the script.

Standalone: python -m agent.testing.scripted_server --script FILE.json [--port N]
            python -m agent.testing.scripted_server --scenario softmax-cpu [--port N]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MODEL = "scripted-model"


class ScriptedServer:
    def __init__(self, script: dict[str, Any] | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.lock = threading.Lock()
        self.script: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        self.index = 0
        self.set_script(script or {"replies": []})
        self.httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def set_script(self, script: dict[str, Any]) -> None:
        with self.lock:
            self.script = dict(script)
            self.index = 0
            self.requests = []

    @property
    def models(self) -> list[str]:
        return list(self.script.get("models") or [DEFAULT_MODEL])

    def start(self) -> ScriptedServer:
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API ---------------------------------------------------------------------------
    def complete(self, body: dict[str, Any], auth: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self.lock:
            self.requests.append(body)
            key = self.script.get("api_key")
            if key and auth != f"Bearer {key}":
                return 401, _error("Incorrect API key provided.", "invalid_api_key"), {}
            if self.script.get("models") and body.get("model") not in self.models:
                return 404, _error(f"The model `{body.get('model')}` does not exist.", "model_not_found"), {}
            has_tools = bool(body.get("tools"))
            if has_tools and self.script.get("tools_supported", True) is False:
                return 400, _error("This model does not support tools.", "invalid_request_error"), {}
            replies = self.script.get("replies", [])
            if self.index < len(replies):
                step = replies[self.index]
                self.index += 1
            elif self.script.get("when_exhausted", "finish") == "error":
                return 500, _error("script exhausted", "server_error"), {}
            else:
                step = {"tool_calls": [{"name": "finish", "arguments": {"summary": "script exhausted"}}]}
        if step.get("delay_s"):
            time.sleep(float(step["delay_s"]))
        if "status" in step:
            code = int(step["status"])
            return code, _error(step.get("error", f"scripted HTTP {code}"), "scripted"), dict(step.get("headers", {}))
        return 200, self._completion(body, step, has_tools), {}

    def _completion(self, body: dict[str, Any], step: dict[str, Any], native: bool) -> dict[str, Any]:
        n = len(self.requests)
        calls = step.get("tool_calls") or []
        content = step.get("text", step.get("content", "")) or ""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls and native:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": c["arguments_raw"] if "arguments_raw" in c else json.dumps(c.get("arguments", {})),
                    },
                }
                for i, c in enumerate(calls)
            ]
            message["content"] = content or None
        elif calls:
            blocks = []
            for c in calls:
                args = c["arguments_raw"] if "arguments_raw" in c else json.dumps(c.get("arguments", {}))
                blocks.append(f'```tool\n{{"name": {json.dumps(c["name"])}, "arguments": {args}}}\n```')
            message["content"] = "\n\n".join(x for x in [content, *blocks] if x)
        if step.get("reasoning"):
            message["reasoning_content"] = step["reasoning"]
        prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        completion_tokens = max(1, len(json.dumps(message)) // 4)
        return {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code, "param": None}}


def _handler_for(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
            pass

        def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and went away: that is what a timeout test wants

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            return json.loads(raw or b"{}")

        def do_GET(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            if path == "/v1/models":
                key = server.script.get("api_key")
                if key and self.headers.get("Authorization") != f"Bearer {key}":
                    self._send(401, _error("Incorrect API key provided.", "invalid_api_key"))
                    return
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "scripted"} for m in server.models]
                self._send(200, {"object": "list", "data": data})
            elif path == "/_scripted/requests":
                with server.lock:
                    self._send(200, {"index": server.index, "requests": server.requests})
            elif path in ("", "/health"):
                self._send(200, {"ok": True})
            else:
                self._send(404, _error(f"no route {self.path}", "not_found"))

        def do_POST(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            try:
                body = self._body()
            except json.JSONDecodeError:
                self._send(400, _error("body is not JSON", "invalid_request_error"))
                return
            if path == "/v1/chat/completions":
                code, payload, headers = server.complete(body, self.headers.get("Authorization", ""))
                self._send(code, payload, headers)
            elif path == "/_scripted/script":
                server.set_script(body)
                self._send(200, {"ok": True})
            else:
                self._send(404, _error(f"no route {self.path}", "not_found"))

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.testing.scripted_server", description=__doc__.split("\n")[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--script", help="JSON file holding the script")
    src.add_argument("--scenario", help="a built-in scenario (agent.testing.scenarios.SCENARIOS)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = json.load(fh)
    else:
        from agent.testing.scenarios import SCENARIOS

        if args.scenario not in SCENARIOS:
            parser.error(f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")
        script = SCENARIOS[args.scenario]()
    server = ScriptedServer(script, host=args.host, port=args.port)
    print(
        f"scripted OpenAI server on http://{args.host}:{server.port}/v1 (models: {', '.join(server.models)})",
        flush=True,
    )
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
