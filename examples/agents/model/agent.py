"""A minimal Archal-style agent: the task from AGENT_TASK, the Anthropic
Messages API through urllib (HTTPS_PROXY and SSL_CERT_FILE are honoured by
the standard library), one bash tool run in the workspace, the answer on
stdout, and metrics.json (Archal's shape) at AGENT_METRICS_FILE."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
KEY = os.environ.get("ANTHROPIC_API_KEY", "")
MODEL = next((m for m in (os.environ.get("AGENT_MODEL"), os.environ.get("ANTHROPIC_MODEL")) if m and m != "default"), "claude-sonnet-4-5")
WORKSPACE = os.environ.get("PROCTOR_WORKSPACE", ".")
TOOLS = [{
    "name": "bash",
    "description": "Run a bash command in the workspace; returns its output.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}]

metrics = {"inputTokens": 0, "outputTokens": 0, "llmCallCount": 0, "toolCallCount": 0,
           "toolErrorCount": 0, "provider": "anthropic", "model": MODEL, "exitReason": "completed"}
start = time.time()


def call(messages):
    body = json.dumps({"model": MODEL, "max_tokens": 1024, "tools": TOOLS, "messages": messages}).encode()
    req = urllib.request.Request(BASE + "/v1/messages", data=body, method="POST", headers={
        "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.load(r)
    usage = out.get("usage", {})
    metrics["llmCallCount"] += 1
    metrics["inputTokens"] += usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0) + usage.get("cache_creation_input_tokens", 0)
    metrics["outputTokens"] += usage.get("output_tokens", 0)
    return out


def main():
    messages = [{"role": "user", "content": os.environ.get("AGENT_TASK", "")}]
    for _ in range(20):
        try:
            reply = call(messages)
        except (urllib.error.URLError, OSError) as e:
            print("model call failed:", e, file=sys.stderr)
            metrics["exitReason"] = "error"
            return 1
        messages.append({"role": "assistant", "content": reply["content"]})
        results = []
        for block in reply["content"]:
            if block.get("type") == "text":
                print(block["text"], flush=True)
            elif block.get("type") == "tool_use":
                metrics["toolCallCount"] += 1
                cmd = block.get("input", {}).get("command", "")
                p = subprocess.run(["bash", "-c", cmd], cwd=WORKSPACE, capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    metrics["toolErrorCount"] += 1
                print(json.dumps({"_tag": "Command", "command": cmd, "exit_code": p.returncode}), flush=True)
                results.append({"type": "tool_result", "tool_use_id": block["id"],
                                "content": (p.stdout + p.stderr)[-4000:], "is_error": p.returncode != 0})
        if reply.get("stop_reason") != "tool_use":
            return 0
        messages.append({"role": "user", "content": results})
    metrics["exitReason"] = "max_turns"
    return 0


if __name__ == "__main__":
    rc = main()
    metrics["totalTimeMs"] = int((time.time() - start) * 1000)
    with open(os.environ.get("AGENT_METRICS_FILE", "metrics.json"), "w") as f:
        json.dump(metrics, f)
    sys.exit(rc)
