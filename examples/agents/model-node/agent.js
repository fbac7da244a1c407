// A minimal Archal-style agent in Node (standard library only): the task
// from AGENT_TASK, OpenAI's Responses API streamed over https (through
// HTTPS_PROXY when set: Node's https does not read it, so the agent opens
// the CONNECT tunnel itself), one bash tool run in the workspace, the
// answer on stdout and metrics.json (Archal's shape) at AGENT_METRICS_FILE.
"use strict";
const http = require("http");
const https = require("https");
const tls = require("tls");
const fs = require("fs");
const { execFileSync } = require("child_process");

const base = new URL((process.env.OPENAI_BASE_URL || "https://api.openai.com/v1").replace(/\/+$/, "") + "/responses");
const model = [process.env.AGENT_MODEL, process.env.OPENAI_MODEL].find((m) => m && m !== "default") || "gpt-5-mini";
const workspace = process.env.PROCTOR_WORKSPACE || ".";
const tools = [{
  type: "function", name: "bash", description: "Run a bash command in the workspace; returns its output.",
  parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
}];
const metrics = { inputTokens: 0, outputTokens: 0, llmCallCount: 0, toolCallCount: 0, toolErrorCount: 0,
  provider: "openai", model, exitReason: "completed" };
const start = Date.now();

// socket opens a TLS connection to the API host, through the proxy's
// CONNECT when HTTPS_PROXY is set.
function socket(cb) {
  const port = Number(base.port || 443);
  const proxy = process.env.HTTPS_PROXY || process.env.https_proxy;
  if (!proxy) return cb(null, tls.connect({ host: base.hostname, port, servername: base.hostname }));
  const p = new URL(proxy);
  // Host names the tunnel's target, as RFC 9110 has it (the proxy
  // refuses a CONNECT whose Host is another authority).
  const target = `${base.hostname}:${port}`;
  const req = http.request({ host: p.hostname, port: p.port || 80, method: "CONNECT", path: target, headers: { host: target } });
  req.on("connect", (res, sock) => {
    if (res.statusCode !== 200) return cb(new Error(`proxy CONNECT: ${res.statusCode}`));
    cb(null, tls.connect({ socket: sock, servername: base.hostname }));
  });
  req.on("error", cb);
  req.end();
}

// call posts one streamed Responses request and resolves with the
// completed response (from response.completed).
function call(input) {
  const body = JSON.stringify({ model, input, tools, stream: true });
  return new Promise((resolve, reject) => {
    socket((err, sock) => {
      if (err) return reject(err);
      const req = https.request({
        host: base.hostname, port: Number(base.port || 443), path: base.pathname + base.search, method: "POST", createConnection: () => sock,
        headers: { "content-type": "application/json", authorization: `Bearer ${process.env.OPENAI_API_KEY || ""}`,
          accept: "text/event-stream", "content-length": Buffer.byteLength(body) },
      }, (res) => {
        let buf = "", done = null, raw = "";
        res.setEncoding("utf8");
        res.on("data", (d) => {
          raw += d;
          buf += d;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const ev = buf.slice(0, i); buf = buf.slice(i + 2);
            for (const line of ev.split("\n")) {
              if (!line.startsWith("data:")) continue;
              const data = line.slice(5).trim();
              if (data === "[DONE]") continue;
              const m = JSON.parse(data);
              if (m.type === "response.output_text.delta") process.stdout.write(m.delta);
              if (m.type === "response.completed") done = m.response;
            }
          }
        });
        res.on("end", () => {
          sock.destroy();
          if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${raw.slice(0, 500)}`));
          if (!done) return reject(new Error("the stream ended without response.completed"));
          resolve(done);
        });
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(body);
    });
  });
}

async function main() {
  const input = [{ role: "user", content: process.env.AGENT_TASK || "" }];
  for (let turn = 0; turn < 20; turn++) {
    const r = await call(input);
    metrics.llmCallCount++;
    metrics.inputTokens += (r.usage && r.usage.input_tokens) || 0;
    metrics.outputTokens += (r.usage && r.usage.output_tokens) || 0;
    process.stdout.write("\n");
    const calls = (r.output || []).filter((o) => o.type === "function_call");
    if (calls.length === 0) return 0;
    for (const o of r.output) input.push(o);
    for (const c of calls) {
      metrics.toolCallCount++;
      const cmd = (JSON.parse(c.arguments || "{}").command) || "";
      let out = "", code = 0;
      try {
        out = execFileSync("bash", ["-c", cmd], { cwd: workspace, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      } catch (e) {
        code = e.status || 1; out = String(e.stdout || "") + String(e.stderr || "");
        metrics.toolErrorCount++;
      }
      console.log(JSON.stringify({ _tag: "Command", command: cmd, exit_code: code }));
      input.push({ type: "function_call_output", call_id: c.call_id, output: out.slice(-4000) });
    }
  }
  metrics.exitReason = "max_turns";
  return 0;
}

main().catch((e) => {
  console.error("model call failed:", e.message);
  metrics.exitReason = "error";
  return 1;
}).then((rc) => {
  metrics.totalTimeMs = Date.now() - start;
  fs.writeFileSync(process.env.AGENT_METRICS_FILE || "metrics.json", JSON.stringify(metrics));
  process.exitCode = rc;
});
