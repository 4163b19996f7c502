// Opens as many /mcp sessions as it can, as a flooding client would: COUNT
// `initialize` requests, CONCURRENCY at a time, with each token given in
// turn, and says how many opened and how many were refused (by status).
// The figures of docs/reliability.md were taken with it.
//
// Usage: node session_flood.mjs URL COUNT CONCURRENCY [TOKEN...]
//   e.g. node session_flood.mjs http://127.0.0.1:4111/mcp 25000 50 "$ANA_TOKEN"
const [url, count, concurrency, ...tokens] = process.argv.slice(2);
if (!url || !count) {
  console.error("usage: node session_flood.mjs URL COUNT CONCURRENCY [TOKEN...]");
  process.exit(2);
}
const total = Number(count);
const initialize = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "flood", version: "1" } },
});
const byStatus = {};
let sent = 0;
const started = Date.now();
const one = async (n) => {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (tokens.length > 0) headers.authorization = `Bearer ${tokens[n % tokens.length]}`;
  const response = await fetch(url, { method: "POST", headers, body: initialize });
  await response.arrayBuffer();
  byStatus[response.status] = (byStatus[response.status] ?? 0) + 1;
};
const worker = async () => {
  while (sent < total) {
    const n = sent;
    sent += 1;
    await one(n).catch((err) => {
      byStatus[err.code ?? "error"] = (byStatus[err.code ?? "error"] ?? 0) + 1;
    });
  }
};
await Promise.all(Array.from({ length: Number(concurrency || 1) }, worker));
console.log(JSON.stringify({ sent: total, byStatus, seconds: (Date.now() - started) / 1000 }));
