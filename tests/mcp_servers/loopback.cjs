// Preloaded into a Node MCP server (node --require loopback.cjs ...): a listen() on a bare port
// binds 127.0.0.1 instead of every interface, so the tests open nothing beyond this machine.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const bare = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (bare && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
