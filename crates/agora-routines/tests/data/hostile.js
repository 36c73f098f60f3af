// One routine, many ways to misbehave; the request's "mode" picks one.
function handle(body) {
  const request = JSON.parse(body);
  switch (request.mode) {
    case "loop":
      for (;;) {}
    case "alloc": {
      const chunks = [];
      for (;;) chunks.push(new Uint8Array(1 << 20).fill(1));
    }
    case "alloc-string": {
      const texts = [];
      for (let n = 1 << 16; ; n *= 2) texts.push("memory".repeat(n));
    }
    case "alloc-objects": {
      const items = [];
      for (let i = 0; ; i++) items.push({ i, text: "item " + i });
    }
    case "recurse": {
      const down = (n) => down(n + 1) + 1;
      return down(0);
    }
    case "probe":
      return {
        std: typeof std, os: typeof os, fetch: typeof fetch, require: typeof require,
        process: typeof process, XMLHttpRequest: typeof XMLHttpRequest, WebSocket: typeof WebSocket,
      };
    case "read-file":
      return std.loadFile("/etc/passwd");
    case "env":
      return os.getenv("HOME");
    case "fetch":
      return fetch("http://127.0.0.1/");
    case "tool-refused":
      return callTool("shell", { cmd: "cat /etc/passwd" });
    case "tool-caught":
      try {
        callTool("shell", {});
        return { caught: false };
      } catch (e) {
        return { caught: String(e) };
      }
    case "slow-tool":
      return callTool("slow", { ms: request.ms });
    case "slow-tools":
      return [callTool("slow", { ms: request.ms }), callTool("slow", { ms: request.ms })];
    case "slow-tool-then-loop":
      callTool("slow", { ms: request.ms });
      for (;;) {}
    default:
      return { ok: true, sum: callTool("add", { a: 2, b: 40 }).sum };
  }
}
