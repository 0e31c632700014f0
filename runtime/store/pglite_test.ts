import assert from "node:assert/strict";
import { PGlite } from "npm:@electric-sql/pglite@0.5.16";
import { DEFAULT_SCHEMA } from "./migrate.ts";
import { ManualClock } from "../base/clock.ts";
import {
  ANALYZE_FROM_BYTES,
  CHECK_EVERY,
  openPglite,
  PgliteClient,
  PgliteSession,
  pgliteTemplate,
} from "./pglite.ts";
import { Store } from "./store.ts";
import { testTemplate } from "../../tests/_pg.ts";

Deno.test("the embedded session looks at its tables' size every CHECK_EVERY statements", () => {
  const session = new PgliteSession();
  const due: number[] = [];
  for (let n = 1; n <= 3 * CHECK_EVERY; n++) if (session.countStatement()) due.push(n);
  assert.deepEqual(due, [CHECK_EVERY, 2 * CHECK_EVERY, 3 * CHECK_EVERY]);
  assert.ok(ANALYZE_FROM_BYTES >= 1 << 20, "small tables are never analysed");
});

/** An in-memory PGlite in the runtime's schema, behind a handle whose session has `schedule`. */
async function scheduled(schedule: ConstructorParameters<typeof PgliteSession>[0]) {
  const template = await testTemplate();
  const db = await PGlite.create(undefined, template ? { loadDataDir: template } : {});
  await db.exec(`set search_path to ${DEFAULT_SCHEMA}`);
  const client = new PgliteClient(db, {
    describe: "pglite:test",
    owned: true,
    session: new PgliteSession(schedule),
  });
  return { db, client };
}

Deno.test("a PGlite store analyses its tables once they are large, and again when they have doubled", async () => {
  // The schedule's knobs, scaled down: a look every 10 statements, analyses from 256 KiB.
  const { db, client } = await scheduled({ checkEvery: 10, analyzeFromBytes: 256 * 1024 });
  try {
    await new Store(client).applySchema();
    const analyses = async () =>
      (await db.query<{ n: number }>(
        `select coalesce(analyze_count, 0)::int as n from pg_stat_user_tables where relname = 'journal'`,
      )).rows[0]?.n ?? 0;
    const statements = async (n: number) => {
      for (let i = 0; i < n; i++) await client.query(`select $1::int as n`, [i]);
    };
    const grow = async (runs: number, from: number) => {
      await db.exec(`
        insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
          select 'r-' || i, 'a', 'g', 'done', 1, now(), now() from generate_series(${from}, ${
        from + runs - 1
      }) i;
        insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, decision)
          select 'r-' || i, s, 'confirmed', 1, 1, now(), '{"tool": "create_server", "args": {"name": "srv"}}'
            from generate_series(${from}, ${from + runs - 1}) i, generate_series(0, 3) s;`);
    };
    await grow(100, 0);
    await statements(100);
    assert.equal(await analyses(), 0, "small tables are left without statistics");
    await grow(1_500, 100);
    await statements(10);
    assert.equal(await analyses(), 1, "large tables are analysed at the next look");
    await statements(100);
    assert.equal(await analyses(), 1, "and not again until they have doubled");
    await grow(2_000, 1_600);
    await statements(10);
    assert.equal(await analyses(), 2, "doubled: analysed again");
  } finally {
    await client.close();
  }
});

Deno.test("a PGlite store vacuums its runs table at every look, and never inside an open transaction", async () => {
  const { db, client } = await scheduled({ checkEvery: 10 });
  try {
    const store = new Store(client);
    await store.applySchema();
    const vacuums = async () =>
      (await db.query<{ n: number }>(
        `select coalesce(vacuum_count, 0)::int as n from pg_stat_user_tables where relname = 'runs'`,
      )).rows[0]?.n ?? 0;
    await store.leases.createOrGetRun({ runId: "long", agent: "a", goal: "g" }, new Date());
    await store.leases.claimRun("long", 0, "w", new Date());
    const before = await vacuums();
    // A long run's heartbeats: each rewrites its row.
    for (let i = 0; i < 25; i++) {
      assert.ok(await store.writes.heartbeat({ runId: "long", epoch: 1 }, new Date()));
    }
    assert.ok((await vacuums()) >= before + 2, "a vacuum at each look (every 10 statements)");
    // Inside a transaction a handle holds open, the look skips the vacuum: it would fail, and every
    // statement after it in the transaction would fail too.
    await db.exec("begin");
    const inside = await vacuums();
    for (let i = 0; i < 12; i++) {
      assert.equal((await client.query<{ n: number }>(`select $1::int as n`, [i]))[0].n, i);
    }
    await db.exec("commit");
    assert.equal(await vacuums(), inside);
  } finally {
    await client.close();
  }
});

/** Lets real I/O run until `clock` has a sleeper (the waiting open between two tries), or `done` is true. */
async function untilAsleep(clock: ManualClock, done: () => boolean = () => false): Promise<void> {
  // Bounded: 10,000 turns of 1 ms each at most, then the test fails on what it sees.
  for (let i = 0; i < 10_000 && clock.pending === 0 && !done(); i++) {
    await new Promise((r) => setTimeout(r, 1));
  }
}

Deno.test("openPglite() waits for a directory another handle holds, saying so once, and opens it when freed", async () => {
  const dir = await Deno.makeTempDir();
  const holder = await openPglite(`${dir}/db`, { template: await testTemplate() });
  const clock = new ManualClock();
  const waits: { holder: string; waitMs: number }[] = [];
  let opened: PgliteClient | undefined;
  let failed: unknown;
  const opening = openPglite(`${dir}/db`, {
    waitMs: 60_000,
    retryMs: 500,
    clock,
    onWait: (w) => waits.push(w),
  })
    .then((c) => opened = c, (err) => failed = err);
  const settled = () => opened !== undefined || failed !== undefined;
  try {
    for (let tries = 0; tries < 10 && !settled(); tries++) {
      await untilAsleep(clock, settled);
      await clock.advance(500);
    }
    await untilAsleep(clock, settled);
    assert.equal(failed, undefined, `still waiting while the directory is held: ${failed}`);
    assert.equal(opened, undefined, "still waiting while the directory is held");
    assert.deepEqual(waits, [{ holder: String(Deno.pid), lockPath: `${dir}/db.lock`, waitMs: 60_000 }]);
    await holder.close();
    // Bounded: the next try after the holder let go takes the lock.
    for (let tries = 0; tries < 5 && !settled(); tries++) {
      await clock.advance(500);
      await untilAsleep(clock, settled);
    }
    await opening;
    assert.equal(failed, undefined, String(failed));
    assert.ok(opened, "opened once the holder closed");
    const store = new Store(opened);
    await store.applySchema();
    assert.deepEqual((await store.operators.listRuns()).runs, []);
    assert.equal(waits.length, 1, "the wait is said once, not at every try");
  } finally {
    await opened?.close();
    await holder.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("openPglite() gives up waiting at the bound with DATA_DIR_LOCKED, naming the holder and the wait", async () => {
  const dir = await Deno.makeTempDir();
  const holder = await openPglite(`${dir}/db`, { template: await testTemplate() });
  const clock = new ManualClock();
  let failed: (Error & { code?: string }) | undefined;
  const opening = openPglite(`${dir}/db`, { waitMs: 2_000, retryMs: 500, clock }).then(
    (c) => c.close().then(() => assert.fail("opened a held directory")),
    (err) => failed = err,
  );
  try {
    for (let tries = 0; tries < 10 && !failed; tries++) {
      await untilAsleep(clock, () => failed !== undefined);
      await clock.advance(500);
    }
    await opening;
    assert.equal(failed?.code, "DATA_DIR_LOCKED");
    assert.match(failed!.message, new RegExp(`in use by pid ${Deno.pid} \\(waited 2 s for it\\)`));
    assert.ok(clock.now().getTime() - Date.UTC(2026, 0, 1) >= 2_000, "not before the bound");
  } finally {
    await holder.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a template starts a new database in memory or in a new directory; a directory that holds one keeps it", async () => {
  // The suite's template is the plain tarball; run alone, the test makes one.
  const template = (await testTemplate()) ?? await pgliteTemplate({ gzip: false });
  const head = [...new Uint8Array(await template.slice(0, 2).arrayBuffer())];
  assert.notDeepEqual(head, [0x1f, 0x8b], "a plain tarball, not gzipped");
  const memory = new Store(await openPglite(undefined, { template }));
  try {
    await memory.applySchema();
    assert.deepEqual((await memory.operators.listRuns()).runs, []);
  } finally {
    await memory.client.close();
  }
  const dir = await Deno.makeTempDir();
  try {
    const first = await openPglite(`${dir}/db`, { template });
    await first.query("create table public.kept (x int)");
    await first.query("insert into public.kept values (7)");
    await first.close();
    const again = await openPglite(`${dir}/db`, { template });
    try {
      assert.deepEqual(await again.query("select x from public.kept"), [{ x: 7 }]);
    } finally {
      await again.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a handle on a shared instance takes its listeners off when it closes; the instance and other handles go on", async () => {
  const template = await testTemplate();
  const db = await PGlite.create(undefined, template ? { loadDataDir: template } : {});
  try {
    const a = new PgliteClient(db, { describe: "a", owned: false });
    const b = new PgliteClient(db, { describe: "b", owned: false });
    const heard: string[] = [];
    await a.listen("ch", (p) => heard.push(`a:${p}`));
    const offB = await b.listen("ch", (p) => heard.push(`b:${p}`));
    await b.exec("notify ch, '1'");
    await a.close();
    await b.exec("notify ch, '2'");
    await offB();
    await b.exec("notify ch, '3'");
    // A handle that listens again after every listener went hears it: the channel was let go and taken anew.
    const c = new PgliteClient(db, { describe: "c", owned: false });
    await c.listen("ch", (p) => heard.push(`c:${p}`));
    await c.exec("notify ch, '4'");
    await c.close();
    await b.close();
    for (let i = 0; i < 50 && heard.length < 4; i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(heard.sort(), ["a:1", "b:1", "b:2", "c:4"]);
    assert.equal((await db.query<{ one: number }>("select 1 as one")).rows[0].one, 1, "the instance is open");
  } finally {
    await db.close();
  }
});
