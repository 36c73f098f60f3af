// Preloaded with `node --require` by agora's tests: every TCP server of the process listens on
// 127.0.0.1 only. The reference "everything" server's HTTP transport calls `app.listen(PORT)`,
// which listens on every interface, and agora's tests and demos bind to loopback only.
"use strict";
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = args.find((a) => typeof a === "function");
  const first = args[0];
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    return listen.call(this, { port: Number(first), host: "127.0.0.1" }, callback);
  }
  if (first && typeof first === "object" && first.path === undefined) {
    return listen.call(this, { ...first, host: "127.0.0.1" }, callback);
  }
  return listen.apply(this, args);
};
