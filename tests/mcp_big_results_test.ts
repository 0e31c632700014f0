/**
 * Big MCP answers over stdio, with a real server process (`mock/mcp_stdio_server.ts large`) under a
 * worker host that holds another run's lease meanwhile. Answers of 12 MB and 20 MB are past the default
 * limit (10 MiB): each fails its call for good by the limit (`TOOL_RESULT_TOO_LARGE`), sent once and
 * never again, not a lost connection with an unknown outcome; the next call goes out on the same
 * connection. While they arrive, the host's heartbeat goes on: no lease is lost, and the other run's
 * tool call is sent exactly once. The worst event-loop stall and heartbeat gap are printed, not
 * asserted (`deno task bench:mcp` measures them by size).
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { DEFAULT_RETRY } from "../runtime/run/deps.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { mcpTools } from "../runtime/mcp/mcp.ts";
import type { Store } from "../runtime/store/store.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { scripted } from "../runtime/testdata/scripted.ts";
import type { McpTestCounts } from "../mock/mcp_servers.ts";
import { bothStoresTest } from "./_pglite.ts";

const STDIO_SERVER = new URL("../mock/mcp_stdio_server.ts", import.meta.url).pathname;
const CONFIG = new URL("../deno.json", import.meta.url).pathname;
const HEARTBEAT_MS = 250;
const LEASE_MS = 3_000;

/** `store`, with the start time of each heartbeat statement noted in `beats` (a wrapper from outside). */
function watchingBeats(store: Store, beats: number[]): Store {
  const leases = new Proxy(store.leases, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop === "heartbeatMany") {
        return (...args: unknown[]) => {
          beats.push(performance.now());
          return value.apply(target, args);
        };
      }
      return value.bind(target);
    },
  });
  return store.withAudiences({ leases });
}

bothStoresTest(
  "a worker receiving 12 MB and 20 MB MCP answers over stdio fails each call by the limit, sent once, and keeps its heartbeat: another run's lease holds and its call is sent once",
  async (store) => {
    const beats: number[] = [];
    const client = new Client(watchingBeats(store, beats));
    const lines: string[] = [];
    const log = new Logger({ clock: new SystemClock(), sink: arraySink(lines), format: "json" });
    const events = (name: string) =>
      lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === name);
    const dir = await Deno.makeTempDir({ prefix: "mcp-big-" });
    const logs = mcpTools({
      command: Deno.execPath(),
      args: ["run", "-A", "--config", CONFIG, STDIO_SERVER, "large", `${dir}/large.json`],
      stderr: "ignore",
      // Declared safe, so a lost connection would be re-sent: the answer must not be taken for one.
      safeToResend: ["export_logs"],
      timeoutMs: 60_000,
    });
    const big = scripted([
      { kind: "tool_calls", calls: [{ name: "export_logs", args: { bytes: 12_000_000 } }] },
      { kind: "tool_calls", calls: [{ name: "export_logs", args: { bytes: 20_000_000 } }] },
      { kind: "tool_calls", calls: [{ name: "count_logs", args: {} }] },
      { kind: "done", text: "The logs are too large to export; there are 42 lines." },
    ]);
    // The other run: its one tool call holds its lease until the big answers are all in.
    let heldSends = 0;
    let release = () => {};
    const released = new Promise<void>((resolve) => release = resolve);
    const hold = defineTool({
      name: "hold",
      description: "Hold until released.",
      args: z.strictObject({}),
      run: async (_args, ctx) => {
        heldSends++;
        await Promise.race([
          released,
          new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))),
        ]);
        return { result: "released" };
      },
    });
    const other = defineAgent({
      name: "holder",
      tools: [hold],
      model: scripted([{ kind: "tool_calls", calls: [{ name: "hold", args: {} }] }, {
        kind: "done",
        text: "Held.",
      }]).model,
    });
    const exporter = defineAgent({ name: "exporter", tools: logs, model: big.model });
    const worker = await client.startWorker([other, exporter], {
      pollMs: 20,
      log,
      heartbeatMs: HEARTBEAT_MS,
      leaseMs: LEASE_MS,
      retry: { ...DEFAULT_RETRY, backoffBaseMs: 5, backoffMaxMs: 5 },
    });
    let stallMs = 0;
    let last = performance.now();
    const probe = setInterval(() => {
      const now = performance.now();
      stallMs = Math.max(stallMs, now - last - 10);
      last = now;
    }, 10);
    try {
      await client.start(other, { runId: "holder", input: "Hold." });
      for (let i = 0; i < 3_000 && heldSends === 0; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(heldSends, 1, "the other run holds its lease, its call in flight");
      const from = beats.length;
      await client.start(exporter, { runId: "exporter", input: "Export the logs." });
      const end = await client.wait("exporter", { timeoutMs: 90_000, pollMs: 20 });
      const gaps = beats.slice(Math.max(0, from - 1)).map((t, i, all) => i === 0 ? 0 : t - all[i - 1]);
      console.log(
        `worst event-loop stall ${Math.round(stallMs)} ms; longest gap between heartbeats ${
          Math.round(Math.max(...gaps))
        } ms (every ${HEARTBEAT_MS} ms, lease ${LEASE_MS} ms)`,
      );
      release();
      const held = await client.wait("holder", { timeoutMs: 30_000, pollMs: 20 });

      // The other run kept its lease throughout: claimed once, its call sent once.
      assert.deepEqual(events("lease-lost"), []);
      assert.deepEqual(events("heartbeat-failed"), []);
      assert.equal(events("claimed").filter((l) => l.run === "holder").length, 1);
      assert.equal((await client.store.reads.getRun("holder"))?.epoch, 1);
      assert.equal(heldSends, 1);
      assert.equal(held.status, "done");

      assert.equal(end.status, "done", JSON.stringify(end));
      const record = await client.reads.inspect("exporter");
      const [twelve, twenty, count] = record.effects;
      for (const [e, bytes] of [[twelve, "12,000,0"], [twenty, "20,000,0"]] as const) {
        assert.deepEqual([e.status, e.attempts], ["failed", 1], JSON.stringify(e));
        assert.match(
          e.error ?? "",
          new RegExp(
            `^export_logs \\(MCP server mcp-test-large\\) answered with ${bytes}\\d\\d bytes .*, over ` +
              "this server's limit of 10,485,760 bytes \\(10.0 MiB\\) \\(maxResultBytes\\): the answer was not kept",
          ),
        );
      }
      assert.deepEqual([count.status, count.result], ["confirmed", '{"lines":42}']);
      assert.deepEqual(events("tool-failed").map((l) => l.code), [
        "TOOL_RESULT_TOO_LARGE",
        "TOOL_RESULT_TOO_LARGE",
      ]);
      for (const name of ["retrying", "flagged", "mcp-disconnected", "mcp-connected"]) {
        assert.deepEqual(events(name), [], `no ${name}: the connection stayed up and nothing was re-sent`);
      }
      const shown = big.asked[1].transcript.filter((m) => m.role === "tool").at(-1);
      assert.ok(shown?.role === "tool" && shown.failed && /over this server's limit/.test(shown.error));
      const counts = JSON.parse(await Deno.readTextFile(`${dir}/large.json`)) as McpTestCounts;
      assert.deepEqual(counts.byKey, { "exporter:0": 1, "exporter:1": 1, "exporter:2": 1 }, "each sent once");
    } finally {
      clearInterval(probe);
      release();
      await worker.stop();
      await logs.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
