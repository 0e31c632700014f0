import assert from "node:assert/strict";
import { defineAgent } from "../agent/agent.ts";
import { Client } from "./client.ts";
import { ManualClock } from "../base/clock.ts";
import { discardSink, Logger } from "../base/log.ts";
import { CountingClient } from "../store/counting.ts";
import type { QueryOptions, SqlClient } from "../store/driver.ts";
import { Store } from "../store/store.ts";
import { encodeDelta, type StreamEvent } from "../run/stream.ts";
import { DeltaBuffer, unreachableBackoffMs } from "./watch.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { testClient } from "../../tests/_pglite.ts";

/** Lets a store's answers and the watcher's continuations run (PGlite answers on later turns). */
const turns = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 1));
};

/** Counts the rows each statement returned, by name; optionally refuses statements as a database that is away. */
class ReadsClient implements SqlClient {
  readonly #inner: SqlClient;
  readonly rows = new Map<string, number>();
  /** While set, a statement it names fails with this error (the watcher's reads, not its listening). */
  fail?: { names: ReadonlySet<string>; error: () => Error };
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }
  get describe(): string {
    return this.#inner.describe;
  }
  async query<T = Record<string, unknown>>(
    text: string,
    params?: unknown[],
    opts?: QueryOptions,
  ): Promise<T[]> {
    const name = opts?.name ?? "(unnamed)";
    if (this.fail?.names.has(name)) throw this.fail.error();
    const out = await this.#inner.query<T>(text, params, opts);
    this.rows.set(name, (this.rows.get(name) ?? 0) + out.length);
    return out;
  }
  run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number> {
    return this.#inner.run(text, params, opts);
  }
  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    return this.#inner.listen!(channel, onPayload);
  }
}

/** What `postgres.js` throws while the server refuses connections. */
const refused = () =>
  Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
const WATCHER_READS = new Set(["watch-run", "read-run", "read-history", "read-history-from"]);

/** An in-memory store seen through a counter of statements and rows, and a client on a ManualClock over it. */
async function watched() {
  const base = await testClient();
  const reads = new ReadsClient(base.store.client);
  const counting = new CountingClient(reads);
  const clock = new ManualClock();
  const client = new Client(new Store(counting), clock);
  return { base, reads, counting, clock, client };
}

/** Follows `runId` in the background until it ends or `stop` aborts; what it told, and how it ended. */
function follow(client: Client, runId: string, opts: Parameters<Client["stream"]>[1] = {}) {
  const stop = new AbortController();
  const events: StreamEvent[] = [];
  const ended = (async () => {
    try {
      for await (const e of client.stream(runId, { signal: stop.signal, ...opts })) events.push(e);
      return "returned";
    } catch (err) {
      return err as Error;
    }
  })();
  return { events, ended, stop };
}

Deno.test("an idle conversation's watcher reads its history once, then no row of it while it waits", async () => {
  const { base, reads, counting, clock, client } = await watched();
  const chat = defineAgent({
    name: "chat",
    tools: [],
    conversation: { idleMs: 3_600_000 },
    model: {
      describe: "echo",
      decide: (req) => Promise.resolve({ kind: "done", text: `answer ${req.seq}` }),
    },
  });
  const worker = await base.startWorker([chat], {
    pollMs: 5,
    log: new Logger({ clock: base.clock, sink: discardSink }),
  });
  try {
    await base.start(chat, { runId: "idle-chat", input: "message 0" });
    await base.wait("idle-chat", { timeoutMs: 20_000, pollMs: 5 });
    for (let i = 1; i < 30; i++) {
      await base.conversations.send("idle-chat", `message ${i}`, { messageId: `m${i}` });
      worker.wake();
      await base.wait("idle-chat", { timeoutMs: 20_000, pollMs: 5 });
    }
  } finally {
    await worker.stop();
  }
  counting.reset();
  reads.rows.clear();
  const w = follow(client, "idle-chat");
  try {
    await turns(20);
    const history = w.events.length;
    assert.equal(w.events.filter((e) => e.type === "answer").length, 30, "the history: every answer once");
    // 60 s of an idle conversation on the ManualClock, a second at a time.
    for (let i = 0; i < 60; i++) {
      await clock.advance(1_000);
      await turns(2);
    }
    await turns(10);
    assert.equal(w.events.length, history, "nothing changed: nothing told");
    const counts = counting.counts;
    assert.equal(
      counts.get("read-history"),
      1,
      `the whole history is read once: ${JSON.stringify([...counts])}`,
    );
    assert.equal(
      counts.get("read-run") ?? 0,
      0,
      "the run's whole row (its input, its last answer) is not read",
    );
    const polls = counts.get("read-history-from") ?? 0;
    // At most every 2 s while it waits (idlePollMs): 30 in 60 s, and never the rows it has.
    assert.ok(polls >= 1 && polls <= 31, `${polls} reads in 60 s`);
    assert.equal(reads.rows.get("read-history-from"), 0, "the reads after the first return no row");
    // The run's row: the existence check, the first read, each poll (and one more if a poll is under way).
    const runReads = counts.get("watch-run") ?? 0;
    assert.ok(runReads === polls + 2 || runReads === polls + 3, `${runReads} watch-run for ${polls} polls`);
  } finally {
    w.stop.abort();
    await w.ended;
    await base.close();
  }
});

Deno.test("a consumer that stops taking events costs its watcher a bounded buffer, and is told a lagged reset", async () => {
  const { base, client } = await watched();
  const agent = defineAgent({
    name: "slow-reader",
    tools: [],
    model: { describe: "none", decide: () => new Promise(() => {}) },
  });
  await base.start(agent, { runId: "unread", input: "go" });
  const events = client.stream("unread", { bufferPieces: 10, bufferChars: 5_000 });
  try {
    assert.equal((await events.next()).value?.type, "status", "the first event, then nobody reads");
    // A worker writes 200 pieces of 100 characters (20,000) while the consumer takes nothing.
    const pieces = Array.from({ length: 200 }, (_, i) => String(i % 10).repeat(100));
    let heard = 0;
    const unlisten = await base.store.stream.listen(() => heard++);
    let offset = 0;
    for (const text of pieces) {
      await base.store.stream.notify(
        encodeDelta({ runId: "unread", epoch: 1, seq: 0, attempt: 1, offset, text }),
      );
      offset += text.length;
    }
    for (let i = 0; i < 100 && heard < pieces.length; i++) await turns(1);
    await unlisten();
    assert.equal(heard, pieces.length, "every piece was delivered to the process");
    // The consumer reads again: a reset for what was dropped, then no more than the bound.
    const told: StreamEvent[] = [];
    for (;;) {
      const e = (await events.next()).value!;
      told.push(e);
      if (e.type === "delta" && e.offset + e.text.length === offset) break;
    }
    const resets = told.filter((e) => e.type === "reset");
    assert.deepEqual(resets.map((e) => e.type === "reset" && e.reason), ["lagged"]);
    const after = told.slice(told.indexOf(resets[0]) + 1).filter((e) => e.type === "delta");
    assert.ok(after.length <= 10, `${after.length} pieces held for the consumer (bound 10)`);
    const text = after.map((e) => e.type === "delta" ? e.text : "").join("");
    assert.ok(text.length <= 5_000, `${text.length} characters held (bound 5,000)`);
    assert.equal(
      text,
      pieces.join("").slice(offset - text.length),
      "what follows the reset is the text's tail, whole",
    );
    const first = after[0];
    assert.ok(first.type === "delta" && first.offset === offset - text.length && first.offset > 0);
  } finally {
    await events.return(undefined);
    await base.close();
  }
});

Deno.test("DeltaBuffer never holds more than its bound: past it, one gap for the latest step's text", () => {
  const buffer = new DeltaBuffer({ pieces: 4, chars: 250 });
  let offset = 0;
  for (let i = 0; i < 50; i++) {
    const seq = i < 30 ? 3 : 4;
    if (i === 30) offset = 0;
    const text = "x".repeat(1 + (i % 90));
    buffer.push({ runId: "r", epoch: 2, seq, attempt: 1, offset, text });
    offset += text.length;
    assert.ok(
      buffer.pieces <= 4 && buffer.chars <= 250,
      `after ${i + 1}: ${buffer.pieces} pieces, ${buffer.chars} chars`,
    );
    assert.ok(buffer.length <= 5, "at most one gap beside the pieces");
  }
  const held = buffer.takeAll();
  const gap = held[0];
  assert.ok(!("text" in gap), "the first entry is the gap");
  assert.equal(gap.seq, 4, "of the latest step written");
  const pieces = held.slice(1).filter((h) => "text" in h);
  assert.ok(pieces.every((p) => p.seq === 4));
  assert.equal(gap.end, pieces.length > 0 ? (pieces[0] as { offset: number }).offset : offset);
  assert.equal(buffer.dropped + held.length - 1, 50, "every piece is either held or counted dropped");
});

Deno.test("a watcher rides out a database that refuses its reads, then goes on from the journal to the run's end", async () => {
  const { base, reads, clock, client } = await watched();
  const agent = defineAgent({
    name: "outage",
    tools: [],
    model: { describe: "none", decide: () => new Promise(() => {}) },
  });
  await base.start(agent, { runId: "away", input: "go" });
  const w = follow(client, "away");
  try {
    await turns(10);
    assert.deepEqual(w.events.map((e) => e.type), ["status"]);
    reads.fail = { names: WATCHER_READS, error: refused };
    // 20 s of the database away: the watcher tries again at 250 ms, 500 ms, 1 s, 2 s, 4 s, then every 5 s.
    for (let i = 0; i < 80; i++) {
      await clock.advance(250);
      await turns(2);
    }
    // Meanwhile a worker answered and closed the run (on the database, through another connection).
    const now = new Date();
    const f = { runId: "away", epoch: (await claim(base.store, "away", 0, "w", now))! };
    await writeDecision(base.store, f, 0, { decision: { done: true, message: "the answer" } }, now);
    await base.store.writes.finishRun(f, "done", null, now, "the answer");
    reads.fail = undefined;
    for (let i = 0; i < 40 && w.events.at(-1)?.type !== "status"; i++) {
      await clock.advance(250);
      await turns(2);
    }
    assert.equal(await w.ended, "returned", "the watcher ended as the run did, with nothing thrown");
    const unreachable = w.events.filter((e) => e.type === "unreachable");
    assert.deepEqual(
      unreachable.slice(0, 6).map((e) => e.type === "unreachable" && e.retryInMs),
      [250, 500, 1_000, 2_000, 4_000, 5_000],
    );
    assert.ok(unreachable.every((e) => e.type === "unreachable" && /ECONNREFUSED/.test(e.error)));
    assert.deepEqual(w.events.filter((e) => e.type !== "unreachable").map((e) => e.type), [
      "status",
      "answer",
      "status",
    ]);
    assert.deepEqual(w.events.at(-1), { type: "status", status: "done", epoch: 1, error: null, idle: false });
  } finally {
    w.stop.abort();
    await w.ended;
    await base.close();
  }
});

Deno.test("a watcher whose database stays away past retryForMs ends with DB_UNREACHABLE; a refused read ends it at once", async (t) => {
  for (
    const c of [
      // Reads fail at 0, 250, 750, 1,750 and 3,750 ms: the last is past 3 s, and ends the watch.
      { name: "away for longer than retryForMs", error: refused, code: "DB_UNREACHABLE", tries: 4 },
      {
        name: "a statement the server refused",
        error: () => Object.assign(new Error('relation "runs" does not exist'), { code: "42P01" }),
        code: "42P01",
        tries: 0,
      },
    ]
  ) {
    await t.step(c.name, async () => {
      const { base, reads, clock, client } = await watched();
      const agent = defineAgent({
        name: "gone",
        tools: [],
        model: { describe: "none", decide: () => new Promise(() => {}) },
      });
      await base.start(agent, { runId: "gone", input: "go" });
      const w = follow(client, "gone", { retryForMs: 3_000 });
      try {
        await turns(10);
        reads.fail = { names: WATCHER_READS, error: c.error };
        for (let i = 0; i < 40 && w.events.filter((e) => e.type === "unreachable").length <= c.tries; i++) {
          await clock.advance(250);
          await turns(2);
        }
        const ended = await w.ended;
        assert.ok(ended instanceof Error);
        assert.equal((ended as Error & { code: string }).code, c.code, ended.message);
        assert.equal(w.events.filter((e) => e.type === "unreachable").length, c.tries);
        if (c.code === "DB_UNREACHABLE") {
          assert.match(
            ended.message,
            /could not be read for \d+ ms \(5 reads; the last failed with: connect ECONNREFUSED/,
          );
        }
      } finally {
        w.stop.abort();
        await w.ended;
        await base.close();
      }
    });
  }
});

Deno.test("a watcher refuses options out of range, naming each", async () => {
  const client = await testClient();
  const agent = defineAgent({
    name: "opts",
    tools: [],
    model: { describe: "none", decide: () => new Promise(() => {}) },
  });
  try {
    await client.start(agent, { runId: "opts", input: "go" });
    await assert.rejects(
      client.stream("opts", { pollMs: 0, bufferChars: 1.5, retryForMs: -1 }).next(),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "WATCH_INVALID");
        assert.match(err.message, /'pollMs' must be an integer 1 or more: current value is 0/);
        assert.match(err.message, /'bufferChars' must be an integer 1 or more: current value is 1.5/);
        assert.match(err.message, /'retryForMs' must be an integer 0 or more: current value is -1/);
        return true;
      },
    );
  } finally {
    await client.close();
  }
});

Deno.test("unreachableBackoffMs doubles from 250 ms to at most 5 s", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 100].map(unreachableBackoffMs), [
    250,
    500,
    1000,
    2000,
    4000,
    5000,
    5000,
    5000,
  ]);
});
